package runner

import (
	"net/http"
	"net/http/httptest"

	"testing"

	"go.uber.org/goleak"
)

// serve serves body on a test HTTP server and returns its URL.
func serve(t *testing.T, body string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(body)) }))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
