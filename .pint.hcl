// pint's configuration: `make lint` runs its offline checks on rules/; tests/mixin/test_live.py
// adds a `prometheus` block (a live Prometheus 3.5 scraping the exporter) and runs the online
// ones too. Every check is on; each one turned off here says why.

rule {
  // `> bool` turns the ratio's NaN (0/0) into 0 and its +Inf (a gc_thresh3 of 0) into 1
  // before the sum, which therefore cannot be NaN or Inf.
  match {
    name = "cluster_family:kubescale_neighbor_nodes_above_warning:sum"
  }
  disable = ["promql/nan"]
}
