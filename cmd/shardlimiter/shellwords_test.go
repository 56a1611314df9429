package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// shellWords splits a command line as a POSIX shell does for the lines
// the docs and the CLI print: words separated by blanks, 'single quotes'
// taken literally, "double quotes" with \" \\ \$ escapes, a backslash
// outside quotes escaping the next character (a backslash-newline joins
// lines). It refuses what it does not model (pipes, redirections,
// substitutions, variables), so that a test never runs a line other than
// the one a reader would.
func shellWords(line string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == '\\' && i+1 < len(line):
			i++
			if line[i] != '\n' {
				w.WriteByte(line[i])
				inWord = true
			}
		case c == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated ' in %q", line)
			}
			w.WriteString(line[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(line) && line[i] != '"'; i++ {
				switch {
				case line[i] == '\\' && i+1 < len(line) && strings.IndexByte(`"\$`+"`", line[i+1]) >= 0:
					i++
				case line[i] == '$' || line[i] == '`':
					return nil, fmt.Errorf("substitution in %q", line)
				}
				w.WriteByte(line[i])
			}
			if i >= len(line) {
				return nil, fmt.Errorf(`unterminated " in %q`, line)
			}
			inWord = true
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		case strings.IndexByte("|&;<>()$`*?[#~", c) >= 0:
			return nil, fmt.Errorf("%q: %c is not modelled", line, c)
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

func TestShellWords(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		line string
		want []string
	}{
		{`shardlimiter check -name api -key account:42`, []string{"shardlimiter", "check", "-name", "api", "-key", "account:42"}},
		{`curl -s -d '{"a": 1}' "http://x/y?a=1&b=2"`, []string{"curl", "-s", "-d", `{"a": 1}`, "http://x/y?a=1&b=2"}},
		{"a \\\n  b", []string{"a", "b"}},
		{`a 'it'\''s' "q\"uote"`, []string{"a", "it's", `q"uote`}},
	} {
		got, err := shellWords(tt.line)
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("shellWords(%q) = %q, %v; want %q", tt.line, got, err, tt.want)
		}
	}
	for _, bad := range []string{"a | b", "a > f", "echo $HOME", `a "$(b)"`, "a 'open", "a && b"} {
		if got, err := shellWords(bad); err == nil {
			t.Errorf("shellWords(%q) = %q, want an error", bad, got)
		}
	}
	// What the CLI prints is read back as it was written.
	for _, s := range []string{"plain", "it's", "a b", `"q"`, "$HOME", "ünï", ""} {
		if got, err := shellWords("x " + shellQuote(s)); err != nil || len(got) != 2 || got[1] != s {
			t.Errorf("shellWords(shellQuote(%q)) = %q, %v", s, got, err)
		}
	}
}
