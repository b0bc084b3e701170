from workgroup.cli import main

main()
