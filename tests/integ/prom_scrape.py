#!/usr/bin/python3
# prom_scrape.py URL OUT -- scrapes a Prometheus endpoint, checks the
# exposition with the real parser (Debian's python3-prometheus-client) and
# with the rules the parser does not enforce (HELP and TYPE for every
# family, well-formed histograms), then writes one 'sample value' line per
# sample to OUT, labels sorted: rdzvd_jobs{phase="running"} 1.0
# Exit 0, or 1 with the reason on stderr; 77 when the parser is missing.
import sys
import urllib.request

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    print("SKIP: python3-prometheus-client is not installed", file=sys.stderr)
    sys.exit(77)

FAMILIES = {
    "rdzvd_build_info": "gauge",
    "rdzvd_start_time_seconds": "gauge",
    "rdzvd_jobs": "gauge",
    "rdzvd_nodes": "gauge",
    "rdzvd_peers": "gauge",
    "rdzvd_peer_refusals": "counter",
    "rdzvd_rounds_completed": "counter",
    "rdzvd_restarts": "counter",
    "rdzvd_joins": "counter",
    "rdzvd_refusals": "counter",
    "rdzvd_auth_failures": "counter",
    "rdzvd_connections_open": "gauge",
    "rdzvd_connections_accepted": "counter",
    "rdzvd_received_bytes": "counter",
    "rdzvd_sent_bytes": "counter",
    "rdzvd_frame_errors": "counter",
    "rdzvd_reconnects": "counter",
    "rdzvd_round_completion_seconds": "histogram",
}


def die(msg):
    print("prom_scrape: " + msg, file=sys.stderr)
    sys.exit(1)


def main():
    url, out = sys.argv[1], sys.argv[2]
    with urllib.request.urlopen(url, timeout=30) as r:
        ctype = r.headers.get("Content-Type", "")
        body = r.read().decode("utf-8")
    if not ctype.startswith("text/plain; version=0.0.4"):
        die("Content-Type is %r" % ctype)
    if not body.endswith("\n"):
        die("the exposition does not end with a newline")

    # HELP then TYPE, once each, before the family's samples.
    helped, typed = set(), {}
    for line in body.splitlines():
        if line.startswith("# HELP "):
            name = line.split()[2]
            if name in helped:
                die("two HELP lines for " + name)
            helped.add(name)
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            if name not in helped:
                die("TYPE before HELP for " + name)
            typed[name] = kind
        elif line and not line.startswith("#"):
            sample = line.split("{")[0].split(" ")[0]
            if not any(sample == n or sample.startswith(n + "_")
                       for n in typed):
                die("sample %s has no TYPE line" % sample)

    try:
        families = list(text_string_to_metric_families(body))
    except ValueError as e:
        die("the parser refused the exposition: %s" % e)
    byname = {f.name: f for f in families}
    for name, kind in FAMILIES.items():
        f = byname.get(name)
        if f is None:
            die("family %s missing (have %s)" % (name, sorted(byname)))
        if f.type != kind:
            die("%s is a %s, want %s" % (name, f.type, kind))
        if not f.documentation:
            die("%s has no HELP text" % name)

    h = byname["rdzvd_round_completion_seconds"]
    buckets = [(s.labels["le"], s.value) for s in h.samples
               if s.name.endswith("_bucket")]
    count = [s.value for s in h.samples if s.name.endswith("_count")]
    total = [s.value for s in h.samples if s.name.endswith("_sum")]
    if not buckets or buckets[-1][0] != "+Inf" or len(count) != 1 or \
            len(total) != 1:
        die("histogram needs buckets ending in +Inf, one _sum, one _count")
    les = [float(le) for le, _ in buckets]
    vals = [v for _, v in buckets]
    if les != sorted(les) or vals != sorted(vals):
        die("histogram buckets not increasing: %s" % buckets)
    if vals[-1] != count[0]:
        die("+Inf bucket %s != _count %s" % (vals[-1], count[0]))

    with open(out, "w") as o:
        for f in families:
            for s in f.samples:
                labels = ",".join('%s="%s"' % (k, s.labels[k])
                                  for k in sorted(s.labels))
                o.write("%s%s %s\n" % (s.name, "{%s}" % labels if labels
                                       else "", s.value))


if __name__ == "__main__":
    main()
