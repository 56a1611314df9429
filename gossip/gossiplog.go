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
//
// A few warnings memberlist logs on routine events are lowered to Info
// (routineWarnings): a node that restarts under its name within the dead
// node reclaim time refutes the "dead" message the others still gossip
// about its previous run, which is how a quick restart rejoins.
//
// Lines that report refused gossip (a wrong key, plaintext to an encrypted
// cluster) are counted in rejected, which may be nil, and logged at Warn
// with the hint every operator needs: the keys differ.
//
// A line that reports this node refuting its own death calls refuted (when
// not nil): memberlist has no callback for it, and it is the only sign
// that other members held this node dead, and so decided its keys,
// while its own view of them never changed (Membership.DeathsRefuted).
func gossipLogger(l *slog.Logger, rejected *rejections, refuted func()) *log.Logger {
	return log.New(logWriter{l, rejected, refuted}, "", 0)
}

// logWriter receives whole lines from log.Logger, which serializes its
// writes; it keeps no state but counters, so it is safe for concurrent use
// anyway.
type logWriter struct {
	log      *slog.Logger
	rejected *rejections
	refuted  func()
}

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

// routineWarnings are the memberlist [WARN] lines, by their text after the
// "memberlist: " prefix, that report a routine event and are logged at
// Info.
var routineWarnings = [][]byte{
	deathRefuted,
}

// deathRefuted starts the line memberlist v0.7.0 logs when it refutes a
// message declaring this node dead (state.go: deadNode); a test pins it
// against the real library (TestHealedPartitionMerges).
var deathRefuted = []byte("Refuting a dead message")

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
	if w.refuted != nil && bytes.Contains(line, deathRefuted) {
		w.refuted()
	}
	if r := rejectReason(line); r >= 0 && w.rejected != nil {
		w.rejected[r].Add(1)
		line = bytes.TrimPrefix(line, []byte("memberlist: "))
		w.log.Warn("gossip refused: the sender's gossip key does not match this node's (--gossip-key-file)",
			"reason", RejectedReasons[r], "detail", string(line))
		return len(p), nil
	}
	if !w.log.Enabled(ctx, level) {
		return len(p), nil
	}
	line = bytes.TrimPrefix(line, []byte("memberlist: "))
	if level == slog.LevelWarn {
		for _, r := range routineWarnings {
			if bytes.HasPrefix(line, r) {
				level = slog.LevelInfo
			}
		}
	}
	w.log.Log(ctx, level, string(line))
	return len(p), nil
}
