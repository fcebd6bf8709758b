from collector.cli.serve import main

raise SystemExit(main())
