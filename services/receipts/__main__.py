"""``python -m services.receipts`` (``session-core receipts``): the receipt tracker."""

from services.receipts.app import ReceiptService
from shared.process import run_service


def main() -> None:
    run_service("receipts", ReceiptService)


if __name__ == "__main__":
    main()
