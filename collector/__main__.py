from collector.cli import main

raise SystemExit(main())
