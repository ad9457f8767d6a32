# Import the module, not the function: pluggy treats every pytest_* name in a
# conftest as a hook and rejects unknown ones.
from sparselab.benchmarking import machine


def pytest_benchmark_update_machine_info(config, machine_info):
    machine.pytest_benchmark_machine_info_hook(machine_info)
