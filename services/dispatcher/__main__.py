from services.cli import main

main(["dispatcher"])
