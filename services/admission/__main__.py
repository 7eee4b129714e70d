from services.cli import main

main(["admission"])
