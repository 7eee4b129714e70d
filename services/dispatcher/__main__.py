"""``python -m services.dispatcher`` (``session-core dispatcher``): the dispatcher."""

from services.dispatcher.app import DispatcherService
from shared.process import run_service


def main() -> None:
    run_service("dispatcher", DispatcherService)


if __name__ == "__main__":
    main()
