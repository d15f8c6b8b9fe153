from harness.command import main

main()
