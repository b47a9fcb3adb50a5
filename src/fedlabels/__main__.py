from fedlabels.cli import main

main()
