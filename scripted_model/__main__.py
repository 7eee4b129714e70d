from scripted_model.server import main

raise SystemExit(main())
