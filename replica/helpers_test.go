package replica

import (
	"io"

	"github.com/hashicorp/go-hclog"
)

// discardLogger is a logger that drops everything.
func discardLogger() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Output: io.Discard, Level: hclog.Off})
}
