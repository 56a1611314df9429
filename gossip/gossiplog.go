package gossip

import (
	"bytes"
	"context"
	"log"
	"log/slog"
)

// gossipLogger returns a *log.Logger for memberlist that writes to l.
//
// memberlist logs through the standard log package, one line per message,
// tagged with its level: "[DEBUG] memberlist: Stream connection from=…". It
// is chatty: a DEBUG line for every stream connection and failed probe. The
// adapter maps the tag to a slog level ([DEBUG] → Debug, [INFO] → Info,
// [WARN] → Warn, [ERR] and [ERROR] → Error, untagged → Info), drops the tag
// and the "memberlist: " prefix, and skips the formatting work when l does
// not log at that level.
func gossipLogger(l *slog.Logger) *log.Logger {
	return log.New(logWriter{l}, "", 0)
}

// logWriter receives whole lines from log.Logger, which serializes its
// writes; it keeps no state, so it is safe for concurrent use anyway.
type logWriter struct{ log *slog.Logger }

var levelTags = []struct {
	tag   []byte
	level slog.Level
}{
	{[]byte("[DEBUG]"), slog.LevelDebug},
	{[]byte("[INFO]"), slog.LevelInfo},
	{[]byte("[WARN]"), slog.LevelWarn},
	{[]byte("[ERR]"), slog.LevelError},
	{[]byte("[ERROR]"), slog.LevelError},
}

func (w logWriter) Write(p []byte) (int, error) {
	line := bytes.TrimRight(p, "\r\n")
	level := slog.LevelInfo
	for _, t := range levelTags {
		if rest, ok := bytes.CutPrefix(line, t.tag); ok {
			level, line = t.level, bytes.TrimLeft(rest, " ")
			break
		}
	}
	ctx := context.Background()
	if !w.log.Enabled(ctx, level) {
		return len(p), nil
	}
	line = bytes.TrimPrefix(line, []byte("memberlist: "))
	w.log.Log(ctx, level, string(line))
	return len(p), nil
}
