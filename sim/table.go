package sim

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// row is one figure of the table: its name and how to print it from a
// report ("" when it was not measured).
type row struct {
	name string
	cell func(r Report) string
}

func dur(d time.Duration) string {
	switch {
	case d == 0:
		return "–"
	case d < time.Millisecond:
		return fmt.Sprintf("%.1f µs", float64(d)/1e3)
	case d < time.Second:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

func num(f float64, format string) string {
	if f == 0 {
		return "–"
	}
	return fmt.Sprintf(format, f)
}

func bytes(b float64) string {
	switch {
	case b == 0:
		return "–"
	case b < 1<<10:
		return fmt.Sprintf("%.0f B", b)
	case b < 1<<20:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", b/(1<<20))
}

func rate(b float64) string {
	if b == 0 {
		return "–"
	}
	return bytes(b) + "/s"
}

func handoff(h Handoff) string {
	if h.Keys == 0 && h.Took == 0 {
		return "–"
	}
	return fmt.Sprintf("%s, %d keys, %s", dur(h.Took), h.Keys, bytes(float64(h.Bytes)))
}

var rows = []row{
	{"keys (K)", func(r Report) string { return fmt.Sprint(r.K) }},
	{"form: one ring of N", func(r Report) string { return dur(r.Form) }},
	{"ring rebuild (ring.New + Without)", func(r Report) string { return dur(r.RingBuild) }},
	{"spread: partitions, max ÷ mean", func(r Report) string { return num(r.Spread.Partitions, "%.3f") }},
	{"spread: keys, max ÷ mean", func(r Report) string { return num(r.Spread.Keys, "%.3f") }},
	{"gossip per member, idle", func(r Report) string { return rate(r.GossipBytes) }},
	{"gossip, busiest member", func(r Report) string { return rate(r.GossipBytesBusiest) }},
	{"CPU per member, idle", func(r Report) string { return num(r.CPUPerMember*1000, "%.1f ms/s") }},
	{"forwards per batch of 100", func(r Report) string { return num(r.ForwardMsgs, "%.1f") }},
	{"time per check, median batch of 100", func(r Report) string { return dur(r.ForwardPerCheck) }},
	{"CPU per check, batches of 100", func(r Report) string { return dur(r.ForwardCPU) }},
	{"replication, whole cluster", func(r Report) string {
		if r.ReplicaKeys == 0 {
			return "–"
		}
		return fmt.Sprintf("%s, %.0f keys/s", rate(r.ReplicaBytes), r.ReplicaKeys)
	}},
	{"join: one ring", func(r Report) string { return dur(r.Join) }},
	{"join: keys moved ÷ ideal 1/(N+1)", func(r Report) string { return num(r.JoinMovedIdeal, "%.2f") }},
	{"join: handoff", func(r Report) string { return handoff(r.JoinHandoff) }},
	{"leave: one ring", func(r Report) string { return dur(r.Leave) }},
	{"leave: handoff", func(r Report) string { return handoff(r.LeaveHandoff) }},
	{"crash: declared, one ring", func(r Report) string { return dur(r.Crash) }},
	{"partition: each half one ring", func(r Report) string { return dur(r.Split) }},
	{"heal: one ring", func(r Report) string { return dur(r.Heal) }},
	{"rolling restart: whole", func(r Report) string { return dur(r.Restart) }},
	{"rolling restart: slowest member", func(r Report) string { return dur(r.RestartWorst) }},
}

// WriteTable writes reports as a Markdown table, one column per report.
func WriteTable(w io.Writer, reports []Report) {
	var b strings.Builder
	b.WriteString("| figure |")
	for _, r := range reports {
		if r.Virtual {
			fmt.Fprintf(&b, " N=%d, virtual |", r.N)
		} else {
			fmt.Fprintf(&b, " N=%d |", r.N)
		}
	}
	b.WriteString("\n|---|")
	for range reports {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, row := range rows {
		fmt.Fprintf(&b, "| %s |", row.name)
		for _, r := range reports {
			fmt.Fprintf(&b, " %s |", row.cell(r))
		}
		b.WriteString("\n")
	}
	io.WriteString(w, b.String())
}
