"""``shared.kafka.KeyPartitioner`` remembers key hashes; it must put every key on the partition
aiokafka's ``DefaultPartitioner`` (Java's murmur2) does — Sessions are owned by partition, and
other Kafka clients (producers in other languages) hash the same way."""

from __future__ import annotations

from aiokafka.partitioner import DefaultPartitioner
from hypothesis import given
from hypothesis import strategies as st

from shared.kafka import KEY_HASHES, KeyPartitioner, make_producer
from shared.settings import Settings


@given(keys=st.lists(st.binary(max_size=80), min_size=1, max_size=20),
       partitions=st.integers(min_value=1, max_value=200))
def test_every_key_lands_where_the_default_partitioner_puts_it(keys: list[bytes],
                                                               partitions: int) -> None:
    mine = KeyPartitioner()
    everyone = list(range(partitions))
    for key in keys + keys:  # the second pass comes from the cache
        assert mine(key, everyone, everyone) == DefaultPartitioner()(key, everyone, everyone)


def test_keys_beyond_the_cache_still_land_where_the_default_partitioner_puts_them() -> None:
    mine, everyone = KeyPartitioner(), list(range(12))
    keys = [f"session_{n:032x}".encode() for n in range(KEY_HASHES + 500)]
    for key in keys + keys[:500]:  # the first 500 were evicted by the time they come again
        assert mine(key, everyone, everyone) == DefaultPartitioner()(key, everyone, everyone)


def test_java_murmur2_vectors() -> None:
    # the partitions Kafka's Java client gives these keys with 12 partitions
    # (Utils.toPositive(Utils.murmur2(key)) % 12; murmur2 values from Kafka's UtilsTest)
    expected = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
                b"a-little-bit-longer-string": -1486304829,
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
                b"abc": 479470107}
    part = KeyPartitioner()
    for key, h in expected.items():
        assert part(key, list(range(12)), []) == (h & 0x7FFFFFFF) % 12


def test_keyless_records_are_spread_over_available_partitions() -> None:
    part = KeyPartitioner()
    seen = {part(None, [0, 1, 2, 3], [1, 3]) for _ in range(200)}
    assert seen == {1, 3}


async def test_the_product_producers_use_it() -> None:
    producer = make_producer(Settings(kafka_bootstrap_servers="127.0.0.1:9"), "t")
    assert isinstance(producer._partitioner, KeyPartitioner)
