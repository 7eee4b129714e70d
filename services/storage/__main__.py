from services.cli import main

main(["storage"])
