"""``python -m services.storage`` (``session-core storage``): the storage service."""

from services.storage.app import StorageService
from shared.process import run_service


def main() -> None:
    run_service("storage", StorageService)


if __name__ == "__main__":
    main()
