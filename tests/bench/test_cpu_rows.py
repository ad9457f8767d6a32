"""The report's machine table prints caches as lscpu does: the total and the instance count."""

from sparselab_bench.report import cache_rows


def test_cache_rows_print_totals_and_instances():
    machine = {"caches": {"l1d": [32768, 2], "l2": [524288, 2], "l3": [33554432, 1]}}
    assert cache_rows(machine) == [
        ["L1d cache", "64 KiB (2 instances)"],
        ["L2 cache", "1 MiB (2 instances)"],
        ["L3 cache", "32 MiB (1 instance)"],
    ]


def test_cache_rows_of_an_older_file_fall_back_to_l2_and_l3():
    assert cache_rows({"l2_cache_size": 2 << 20, "l3_cache_size": 54 << 20}) == [["L2 / L3", "2 MiB / 54 MiB"]]
