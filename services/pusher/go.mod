module github.com/pilotwire/pilotwire/services/pusher

go 1.26.0

require (
	github.com/pilotwire/pilotwire/pkg v0.0.0-00010101000000-000000000000
	github.com/pilotwire/pilotwire/proto v0.0.0-00010101000000-000000000000
)

replace (
	github.com/pilotwire/pilotwire/pkg => ../../pkg
	github.com/pilotwire/pilotwire/proto => ../../proto
)
