module github.com/pilotwire/pilotwire/proto

go 1.26

require google.golang.org/protobuf v1.36.12
