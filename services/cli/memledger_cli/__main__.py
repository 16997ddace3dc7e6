from memledger_cli.main import main

raise SystemExit(main())
