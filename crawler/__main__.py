from crawler.cli import main

raise SystemExit(main())
