"""Suite-wide collection order."""

from collections import Counter


def pytest_collection_modifyitems(items):
    """Files with the most end-to-end (slow) tests first.

    `make test` runs whole files on two workers (pytest-xdist, --dist
    loadfile); a long file handed out last keeps one worker busy while the
    other idles. Within a file, and among files of equal weight, the order
    is pytest's.
    """
    slow = Counter(str(item.path) for item in items if item.get_closest_marker("slow"))
    items.sort(key=lambda item: -slow[str(item.path)])
