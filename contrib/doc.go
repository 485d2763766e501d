// Package contrib holds no code: its tests check the files shipped under
// contrib/ and the Dockerfile, namely that the systemd unit passes
// systemd-analyze verify, that the Grafana dashboard and the Prometheus
// alert rules use only metrics a daemon exports (and pass promtool), and
// that the container image builds and runs. (contrib/cluster, a package of
// its own, is the command behind make cluster.)
package contrib
