from services.cli import main

main(["receipts"])
