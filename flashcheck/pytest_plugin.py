"""pytest options for choosing the kernel under test (filled in by the property-suite work)."""


def pytest_addoption(parser):
    pass
