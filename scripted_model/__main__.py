from services.modelserver.server import main

raise SystemExit(main())
