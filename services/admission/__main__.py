"""``python -m services.admission`` (``session-core admission``): the admission service (the
HTTP API and session.input)."""

from services.admission.app import AdmissionService
from shared.process import run_service


def main() -> None:
    run_service("admission", AdmissionService)


if __name__ == "__main__":
    main()
