from kube_scale_exporter.cli import main

raise SystemExit(main())
