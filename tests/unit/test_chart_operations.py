"""The chart installs as documented and can be watched: every component is scraped,
the Ingress never routes /metrics, the topics Job reads only Kafka credentials, the image is
the one required value, and the optional objects (helm test, NetworkPolicy, KEDA, Strimzi
KafkaTopics, alerts, dashboard) render what the code means.

Rendered-chart tests need Helm (``make deploy-check`` builds it into ~/.cache/session-core/bin)
and are skipped without it, like tests/unit/test_chart_settings.py's."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY

from tests.support.helm import CHART, IMAGE, helm_template, render

REPO = Path(__file__).resolve().parents[2]
PRODUCTION = REPO / "deploy" / "helm" / "values-production.yaml"
ALL_OPTIONAL = REPO / "deploy" / "helm" / "testdata" / "all-optional.yaml"
COMPONENTS = {"admission", "storage", "dispatcher", "receipts"}
Doc = dict[str, Any]


def kind(docs: list[Doc], k: str) -> list[Doc]:
    return [d for d in docs if d["kind"] == k]


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


# --- the checks, as functions so that each is also shown to catch what it is for -----------


def unscraped(docs: list[Doc]) -> set[str]:
    """Components whose /metrics no ServiceMonitor reaches: a Deployment's container port named
    ``metrics`` must be the target of a Service port that a ServiceMonitor endpoint names, on
    a Service the ServiceMonitor's selector matches."""
    monitors = kind(docs, "ServiceMonitor")
    missing = set()
    for dep in kind(docs, "Deployment"):
        comp = dep["metadata"]["labels"]["app.kubernetes.io/component"]
        pod_labels = dep["spec"]["template"]["metadata"]["labels"]
        (c,) = dep["spec"]["template"]["spec"]["containers"]
        ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
        ok = False
        for svc in kind(docs, "Service"):
            if not _selects(svc["spec"].get("selector", {}), pod_labels):
                continue
            for sp in svc["spec"]["ports"]:
                if sp.get("targetPort") != "metrics" or "metrics" not in ports:
                    continue
                for sm in monitors:
                    if _selects(sm["spec"]["selector"]["matchLabels"], svc["metadata"]["labels"]) \
                            and any(e["port"] == sp["name"] and e["path"] == "/metrics"
                                    for e in sm["spec"]["endpoints"]):
                        ok = True
        if not ok:
            missing.add(comp)
    return missing


def routes_metrics(docs: list[Doc]) -> list[str]:
    """Ingress paths that would send /metrics to a backend (Prefix matches by path element,
    ImplementationSpecific as a plain prefix, as ingress-nginx does)."""
    bad = []
    for ing in kind(docs, "Ingress"):
        for rule in ing["spec"]["rules"]:
            for p in rule["http"]["paths"]:
                path, typ = p["path"].rstrip("/"), p["pathType"]
                if (path == "/metrics"
                        or (typ == "Prefix" and "/metrics/".startswith(path + "/"))
                        or (typ == "ImplementationSpecific" and "/metrics".startswith(path))):
                    bad.append(f"{p['path']} ({typ})")
    return bad


@pytest.mark.parametrize("values", [[], ["--values", str(PRODUCTION)],
                                    ["--values", str(ALL_OPTIONAL)]],
                         ids=["default+servicemonitor", "production", "all-optional"])
def test_every_component_is_scraped(values: list[str]) -> None:
    docs = render("--set=serviceMonitor.enabled=true", *values)
    assert {d["metadata"]["labels"]["app.kubernetes.io/component"]
            for d in kind(docs, "Deployment")} == COMPONENTS
    assert unscraped(docs) == set()


@pytest.mark.parametrize("component", sorted(COMPONENTS))
def test_the_scrape_check_catches_a_component_left_out(component: str) -> None:
    docs = render("--set=serviceMonitor.enabled=true")
    without = [d for d in docs if not (d["kind"] == "Service" and d["metadata"]["name"]
                                       == f"t-session-core-{component}-metrics")]
    assert len(without) == len(docs) - 1
    assert unscraped(without) == {component}


def test_metrics_port_is_the_health_port_on_every_component() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    port = values["config"]["SESSION_CORE_HEALTH_PORT"]
    docs = render()
    for dep in kind(docs, "Deployment"):
        (c,) = dep["spec"]["template"]["spec"]["containers"]
        assert {p["name"]: p["containerPort"] for p in c["ports"]}["metrics"] == port
    for svc in kind(docs, "Service"):
        if svc["metadata"]["name"].endswith("-metrics"):
            assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["ports"][0]["port"] == port
        else:  # admission's API Service: no metrics port
            assert [p["name"] for p in svc["spec"]["ports"]] == ["http"]


def test_the_ingress_never_routes_metrics() -> None:
    for values in ([], ["--values", str(PRODUCTION)]):
        docs = render("--set=ingress.enabled=true", *values)
        (ing,) = kind(docs, "Ingress")
        assert routes_metrics(docs) == []
        assert [p["path"] for r in ing["spec"]["rules"] for p in r["http"]["paths"]] == ["/v1"]


@pytest.mark.parametrize(("path", "path_type", "refused"), [
    ("/", "Prefix", True), ("/metrics", "Prefix", True), ("/metrics", "Exact", True),
    ("/m", "ImplementationSpecific", True), ("/", "Exact", False), ("/v1", "Prefix", False),
    ("/met", "Prefix", False),
])
def test_an_ingress_path_that_would_route_metrics_is_refused(path: str, path_type: str,
                                                             refused: bool) -> None:
    out = helm_template(IMAGE, "--set=ingress.enabled=true",
                        "--set=ingress.hosts[0].host=x.example",
                        f"--set=ingress.hosts[0].paths[0].path={path}",
                        f"--set=ingress.hosts[0].paths[0].pathType={path_type}")
    fake = [{"kind": "Ingress", "spec": {"rules": [{"http": {"paths": [
        {"path": path, "pathType": path_type}]}}]}}]
    assert bool(routes_metrics(fake)) is refused
    if refused:
        assert out.returncode != 0 and "would route /metrics" in out.stderr, out.stderr
    else:
        assert out.returncode == 0, out.stderr


def test_production_ingress_allows_long_waits_and_unbuffered_sse() -> None:
    (ing,) = kind(render("--values", str(PRODUCTION)), "Ingress")
    a = ing["metadata"]["annotations"]
    # ?wait lasts up to 600 s: the proxy must wait longer than that
    assert int(a["nginx.ingress.kubernetes.io/proxy-read-timeout"]) > 600
    assert int(a["nginx.ingress.kubernetes.io/proxy-send-timeout"]) > 600
    assert a["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"


def test_the_image_repository_is_required_and_says_how_to_get_one() -> None:
    out = helm_template()
    assert out.returncode != 0
    assert "image.repository is required" in out.stderr and "make image" in out.stderr
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["image"]["repository"] == ""
    assert next(iter(values)) == "image", "the one required value comes first"


def test_the_topics_job_reads_only_kafka_credentials() -> None:
    docs = render("--values", str(PRODUCTION))
    (job,) = kind(docs, "Job")
    (c,) = job["spec"]["template"]["spec"]["containers"]
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"]["name"] for e in c["env"]
            if "valueFrom" in e}
    assert refs == {"SESSION_CORE_KAFKA_SASL_USERNAME": "session-core-kafka-user",
                    "SESSION_CORE_KAFKA_SASL_PASSWORD": "session-core"}
    assert c["args"] == ["topics", "create"]
    # the services still read all of them
    for dep in kind(docs, "Deployment"):
        (dc,) = dep["spec"]["template"]["spec"]["containers"]
        names = {e["name"] for e in dc["env"] if "valueFrom" in e}
        assert {"MONGODB_URI", "SESSION_CORE_API_KEYS"} <= names


def prestop_seconds(pre_stop: Doc) -> float:
    """How long a preStop handler keeps the pod serving: the sleep action's seconds, or an
    exec of ``/bin/sleep N``."""
    if "sleep" in pre_stop:
        return float(pre_stop["sleep"]["seconds"])
    cmd = pre_stop["exec"]["command"]
    assert cmd[0] == "/bin/sleep" and len(cmd) == 2, cmd
    return float(cmd[1])


def _oldest_supported() -> str:
    """Chart.yaml's kubeVersion floor (">=1.27.0-0" -> "1.27.0")."""
    constraint = yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"]
    m = re.fullmatch(r">=(\d+\.\d+\.\d+)(-0)?", constraint)
    assert m, constraint
    return m.group(1)


# the preStop `sleep` action is on by default from Kubernetes 1.30 (PodLifecycleSleepAction);
# older clusters drop or refuse it, so the chart execs the image's sleep there
@pytest.mark.parametrize(("kube", "action"), [
    (_oldest_supported(), "exec"), ("1.29.9", "exec"), ("v1.29.3-eks-1234", "exec"),
    ("1.30.0", "sleep"), ("v1.30.1-gke.100", "sleep"), ("1.37.0", "sleep")])
def test_pods_get_startup_probe_prestop_and_extra_volumes(kube: str, action: str) -> None:
    docs = render("--values", str(ALL_OPTIONAL), "--kube-version", kube)
    pods = [d["spec"]["template"]["spec"] for d in kind(docs, "Deployment")]
    assert len(pods) == 4
    for spec in pods:
        (c,) = spec["containers"]
        assert c["startupProbe"]["httpGet"]["path"] == "/healthz"
        pre_stop = c["lifecycle"]["preStop"]
        assert list(pre_stop) == [action]
        assert prestop_seconds(pre_stop) == 5
        assert {"name": "kafka-client-cert", "mountPath": "/etc/session-core/kafka-client",
                "readOnly": True} in c["volumeMounts"]
        assert any(v["name"] == "kafka-client-cert" for v in spec["volumes"])
        assert spec["terminationGracePeriodSeconds"] > prestop_seconds(pre_stop)


def test_no_prestop_when_its_sleep_is_zero_and_no_install_below_the_supported_floor() -> None:
    for kube in (_oldest_supported(), "1.37.0"):
        docs = render("--set=preStopSleepSeconds=0", "--kube-version", kube)
        for dep in kind(docs, "Deployment"):
            (c,) = dep["spec"]["template"]["spec"]["containers"]
            assert "lifecycle" not in c
    major, minor, _ = _oldest_supported().split(".")
    out = helm_template(IMAGE, "--kube-version", f"{major}.{int(minor) - 1}.0")
    assert out.returncode != 0 and "kubeVersion" in out.stderr, out.stderr


def test_helm_test_pod_checks_readyz_and_an_authenticated_404() -> None:
    docs = render("--values", str(PRODUCTION))
    (pod,) = kind(docs, "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    (c,) = pod["spec"]["containers"]
    script = c["args"][0]
    assert '"/readyz"' in script and "404" in script and "session_" in script
    env = {e["name"]: e for e in c["env"]}
    assert env["API_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "session-core-helm-test"
    assert env["ADMISSION_URL"]["value"] == "http://t-session-core-admission:80"
    compile(script, "helm-test", "exec")  # the inline check is valid Python


def test_network_policy_per_component_admits_only_http_and_metrics() -> None:
    docs = render("--values", str(PRODUCTION))
    pols = {p["metadata"]["labels"]["app.kubernetes.io/component"]: p
            for p in kind(docs, "NetworkPolicy")}
    assert set(pols) == COMPONENTS
    for comp, pol in pols.items():
        ports = [p["port"] for rule in pol["spec"]["ingress"] for p in rule["ports"]]
        assert ports == (["http", "metrics"] if comp == "admission" else ["metrics"])
        metrics_rule = pol["spec"]["ingress"][-1]
        assert metrics_rule["from"][0]["namespaceSelector"]["matchLabels"] == {
            "kubernetes.io/metadata.name": "monitoring"}


def test_keda_scaled_objects_follow_the_services_consumer_groups() -> None:
    from services.dispatcher.app import GROUP as DISPATCHER
    from services.receipts.app import GROUP as RECEIPTS
    from services.storage.app import GROUP as STORAGE

    docs = render("--values", str(ALL_OPTIONAL), "--set=config.SESSION_CORE_TOPIC_PREFIX=p.")
    objs = {o["metadata"]["labels"]["app.kubernetes.io/component"]: o
            for o in kind(docs, "ScaledObject")}
    assert set(objs) == {"storage", "dispatcher", "receipts"}, "admission keeps its HPA"
    groups = {c: {t["metadata"]["consumerGroup"] for t in o["spec"]["triggers"]}
              for c, o in objs.items()}
    assert groups == {"storage": {f"p.{STORAGE}"}, "dispatcher": {f"p.{DISPATCHER}"},
                      "receipts": {f"p.{RECEIPTS}"}}
    assert {t["metadata"]["topic"] for t in objs["storage"]["spec"]["triggers"]} == {
        "p.session.admitted", "p.core.facts", "p.runtime.observations"}
    assert not [h for h in kind(docs, "HorizontalPodAutoscaler")
                if h["metadata"]["labels"]["app.kubernetes.io/component"] in objs]


def test_strimzi_topics_are_the_declared_topics() -> None:
    from shared.settings import Settings
    from shared.topics import Topics, declared_topics

    docs = render("--values", str(ALL_OPTIONAL), "--set=config.SESSION_CORE_TOPIC_PREFIX=p.",
                  "--set=config.SESSION_CORE_INPUT_TENANTS=acme\\, globex",
                  "--set=kafkaAcls.enabled=false")
    topics = {t["spec"]["topicName"]: t["spec"] for t in kind(docs, "KafkaTopic")}
    values = yaml.safe_load((CHART / "values.yaml").read_text())["config"]
    s = Settings(topic_prefix="p.", topic_partitions=values["SESSION_CORE_TOPIC_PARTITIONS"],
                 topic_replication_factor=values["SESSION_CORE_TOPIC_REPLICATION_FACTOR"],
                 topic_retention_ms=values["SESSION_CORE_TOPIC_RETENTION_MS"])
    from shared.kafka import max_record_bytes

    declared = declared_topics(s, Topics(prefix="p.", tenants=("acme", "globex")),
                               max_record_bytes(s))
    assert "p.session.input.results.globex.dlq" in {d.name for d in declared}
    assert set(topics) == {d.name for d in declared}
    for d in declared:
        t = topics[d.name]
        assert (t["partitions"], t["replicas"]) == (d.partitions, d.replication_factor)
        assert t["config"] == d.configs, d.name


def _metric_names_in(text: str) -> set[str]:
    return set(re.findall(r"\b(session_core_[a-z_]+|faststream_[a-z_]+)", text))


def _registered() -> set[str]:
    import services.admission.http  # noqa: F401  (registers the HTTP metrics)
    import shared.metrics  # noqa: F401
    from shared.kafka import make_broker
    from shared.settings import Settings

    make_broker(Settings(), "probe")  # FastStream's metrics register with the middleware
    names = set()
    for metric in REGISTRY.collect():
        for sample in metric.samples:
            names.add(sample.name)
        names.add(metric.name)
        names.add(metric.name + "_total")
        if metric.type == "histogram":  # labelled ones have no samples before first use
            names.update(metric.name + sfx for sfx in ("_bucket", "_count", "_sum"))
    return names


ALERTS = {"SessionCoreDeadLetters", "SessionCoreUncertainVerdicts", "SessionCoreConsumerLag",
          "SessionCoreHTTP5xx", "SessionCoreAdmissionLatencyP99", "SessionCoreNoReadyRuntime"}
OPERATIONS = REPO / "docs" / "operations.md"
RUNBOOK_BASE = "https://git.example.com/platform/session-core/-/blob/main/docs/operations.md"


def alerts(docs: list[Doc]) -> dict[str, Doc]:
    (rule,) = kind(docs, "PrometheusRule")
    return {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}


def sections(markdown: str) -> dict[str, str]:
    """GitHub's anchor of every heading (lower case, punctuation dropped, spaces to hyphens)
    → the text under it up to the next heading of the same or a higher level."""
    lines = markdown.splitlines()
    fenced, heads = False, []  # (line number, level, title); a shell comment is no heading
    for n, line in enumerate(lines):
        fenced ^= line.startswith("```")
        m = None if fenced else re.match(r"(#{1,6}) (.+)$", line)
        if m:
            heads.append((n, len(m.group(1)), m.group(2).strip()))
    out: dict[str, str] = {}
    for i, (n, level, title) in enumerate(heads):
        end = next((h[0] for h in heads[i + 1:] if h[1] <= level), len(lines))
        anchor = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        out[anchor] = "\n".join(lines[n + 1:end])
    return out


def runbook_gaps(rules: dict[str, Doc], base: str, markdown: str) -> list[str]:
    """Alerts without a runbook_url into ``base``, or whose anchor is no heading of
    ``markdown``, or whose section does not say what it means, how to check and what to do."""
    heads = sections(markdown)
    gaps = []
    for name, r in sorted(rules.items()):
        url = r.get("annotations", {}).get("runbook_url", "")
        page, _, anchor = url.partition("#")
        if page != base or anchor not in heads:
            gaps.append(f"{name}: {url!r}")
        elif not all(f"**{part}.**" in heads[anchor]
                     for part in ("Means", "Likely causes", "Check", "Remedies")):
            gaps.append(f"{name}: section #{anchor} lacks Means/Likely causes/Check/Remedies")
    return gaps


@pytest.mark.parametrize("values", [PRODUCTION, ALL_OPTIONAL], ids=["production", "all-optional"])
def test_every_alert_has_a_runbook_section_in_docs_operations(values: Path) -> None:
    rules = alerts(render("--values", str(values)))
    assert set(rules) == ALERTS
    assert runbook_gaps(rules, RUNBOOK_BASE, OPERATIONS.read_text()) == []
    for name, r in rules.items():  # the anchor is the alert's name
        assert r["annotations"]["runbook_url"] == f"{RUNBOOK_BASE}#{name.lower()}"
        # its section names the metrics the alert queries
        section = sections(OPERATIONS.read_text())[name.lower()]
        for metric in re.findall(r"\b((?:session_core|kafka)_[a-z_]+)", r["expr"]):
            assert re.sub(r"_bucket$", "", metric) in section, (name, metric)


def test_the_runbook_check_catches_a_missing_url_anchor_or_section() -> None:
    rules = alerts(render("--values", str(PRODUCTION)))
    md = OPERATIONS.read_text()
    r = rules["SessionCoreHTTP5xx"]
    no_url = {**rules, "SessionCoreHTTP5xx": {**r, "annotations": {}}}
    assert runbook_gaps(no_url, RUNBOOK_BASE, md) == ["SessionCoreHTTP5xx: ''"]
    assert runbook_gaps(rules, RUNBOOK_BASE, md.replace("## SessionCoreHTTP5xx", "## HTTP")) == [
        f"SessionCoreHTTP5xx: '{RUNBOOK_BASE}#sessioncorehttp5xx'"]
    thin = md.replace("**Remedies.** 503", "503")
    assert runbook_gaps(rules, RUNBOOK_BASE, thin) == [
        "SessionCoreHTTP5xx: section #sessioncorehttp5xx lacks Means/Likely causes/Check/Remedies"]


def test_alerts_need_a_runbook_base_url() -> None:
    out = helm_template(IMAGE, "--set=prometheusRule.enabled=true")
    assert out.returncode != 0 and "prometheusRule.runbookBaseUrl is required" in out.stderr
    rules = alerts(render("--set=prometheusRule.enabled=true",
                          "--set=prometheusRule.runbookBaseUrl=https://wiki.example/ops#"))
    assert rules["SessionCoreHTTP5xx"]["annotations"]["runbook_url"] == (
        "https://wiki.example/ops#sessioncorehttp5xx")


@pytest.mark.parametrize(("harnesses", "regex"), [
    ("{codex}", "codex"), ("{codex,claude_code,minimax_code}", "codex|claude_code|minimax_code"),
    ("null", None)])
def test_no_ready_runtime_alert_watches_the_harnesses_run(harnesses: str, regex: str | None
                                                          ) -> None:
    args = ["--values", str(PRODUCTION), f"--set=prometheusRule.harnesses={harnesses}"]
    if harnesses == "null":  # an empty list: no such alert
        args[-1] = "--set-json=prometheusRule.harnesses=[]"
    rules = alerts(render(*args))
    if regex is None:
        assert "SessionCoreNoReadyRuntime" not in rules
        return
    r = rules["SessionCoreNoReadyRuntime"]
    assert r["expr"] == ('max by (harness) (session_core_runtimes_ready{namespace="default", '
                         f'harness=~"{regex}"}}) == 0')
    assert r["labels"]["severity"] == "critical"


def test_the_new_alerts_query_the_metrics_the_services_observe() -> None:
    from shared.domain.harness import HARNESSES
    from shared.metrics import ADMISSION_SECONDS, RUNTIMES_READY

    rules = alerts(render("--values", str(PRODUCTION),
                          "--set-json=prometheusRule.admissionP99Seconds=0.5"))
    latency = rules["SessionCoreAdmissionLatencyP99"]["expr"]
    assert f"rate({ADMISSION_SECONDS._name}_bucket{{" in latency
    assert latency.startswith("histogram_quantile(0.99, sum by (le, operation)")
    assert latency.rstrip().endswith("> 0.5")
    ready = rules["SessionCoreNoReadyRuntime"]["expr"]
    assert f"({RUNTIMES_READY._name}{{" in ready
    assert RUNTIMES_READY._labelnames == ("harness",)
    schema = json.loads((CHART / "values.schema.json").read_text())
    enum = schema["properties"]["prometheusRule"]["properties"]["harnesses"]["items"]["enum"]
    assert tuple(enum) == HARNESSES


def test_alerts_and_dashboard_use_metrics_the_code_exports() -> None:
    docs = render("--values", str(PRODUCTION))
    (rule,) = kind(docs, "PrometheusRule")
    exprs = " ".join(r["expr"] for g in rule["spec"]["groups"] for r in g["rules"])
    assert set(alerts(docs)) == ALERTS
    (cm,) = [d for d in kind(docs, "ConfigMap") if d["metadata"]["name"].endswith("-dashboard")]
    dash = json.loads(cm["data"]["session-core.json"])
    dash_exprs = " ".join(t["expr"] for p in dash["panels"] for t in p["targets"])
    used = _metric_names_in(exprs) | _metric_names_in(dash_exprs)
    # histograms are queried by their _bucket series
    exported = _registered()
    unknown = {n for n in used if n not in exported}
    assert not unknown, f"alerts/dashboard query metrics nothing exports: {sorted(unknown)}"
    assert "session_core_http_request_duration_seconds_bucket" in used
    assert {"session_core_admission_duration_seconds_bucket", "session_core_runtimes_ready"} <= used
