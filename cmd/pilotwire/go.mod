module github.com/pilotwire/pilotwire/cmd/pilotwire

go 1.26.0

require (
	github.com/pilotwire/pilotwire/pkg v0.0.0-00010101000000-000000000000
	github.com/pilotwire/pilotwire/proto v0.0.0-00010101000000-000000000000
	github.com/pilotwire/pilotwire/services/ads v0.0.0-00010101000000-000000000000
	github.com/pilotwire/pilotwire/services/debouncer v0.0.0-00010101000000-000000000000
	github.com/pilotwire/pilotwire/services/ingest v0.0.0-00010101000000-000000000000
	github.com/pilotwire/pilotwire/services/pusher v0.0.0-00010101000000-000000000000
)

replace (
	github.com/pilotwire/pilotwire/pkg => ../../pkg
	github.com/pilotwire/pilotwire/proto => ../../proto
	github.com/pilotwire/pilotwire/services/ads => ../../services/ads
	github.com/pilotwire/pilotwire/services/debouncer => ../../services/debouncer
	github.com/pilotwire/pilotwire/services/ingest => ../../services/ingest
	github.com/pilotwire/pilotwire/services/pusher => ../../services/pusher
)
