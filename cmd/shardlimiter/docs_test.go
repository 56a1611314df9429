package main

import (
	"bytes"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// repoRoot is the repository's top directory, from this package's.
const repoRoot = "../.."

// TestDocLinksResolve reads every Markdown file of the repository: each
// relative link names a file or directory that exists, and each #anchor a
// heading of the file it points into (as GitHub derives anchors).
func TestDocLinksResolve(t *testing.T) {
	t.Parallel()
	docs := markdownFiles(t)
	if len(docs) < 5 {
		t.Fatalf("found %d Markdown files under %s: the walk is broken", len(docs), repoRoot)
	}
	anchors := map[string]map[string]bool{} // by file, read on demand
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		anchors[path] = headingAnchors(data)
		return anchors[path]
	}
	checked := 0
	for _, doc := range docs {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, link := range relativeLinks(data) {
			checked++
			target, frag, _ := strings.Cut(link, "#")
			path := doc
			if target != "" {
				path = filepath.Join(filepath.Dir(doc), filepath.FromSlash(target))
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s: link %q: %v", rel(doc), link, err)
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			if !anchorsOf(path)[frag] {
				t.Errorf("%s: link %q: %s has no heading with anchor #%s", rel(doc), link, rel(path), frag)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found: the parser is broken")
	}
}

// TestEveryFlagInTheREADME: each flag the binary defines has a row in the
// configuration table of README.md.
func TestEveryFlagInTheREADME(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	table := section(data, "## Configuration")
	if table == "" {
		t.Fatal("README.md has no \"## Configuration\" section")
	}
	var rows strings.Builder
	for line := range strings.SplitSeq(table, "\n") {
		if strings.HasPrefix(line, "|") {
			rows.WriteString(line + "\n")
		}
	}
	fset, _ := newFlagSet("shardlimiter", &bytes.Buffer{})
	n := 0
	fset.VisitAll(func(f *flag.Flag) {
		n++
		if !strings.Contains(rows.String(), "`--"+f.Name+"`") {
			t.Errorf("README.md's configuration table has no row for --%s", f.Name)
		}
	})
	if n == 0 {
		t.Fatal("the binary defines no flag: the test is broken")
	}
}

// markdownFiles lists the *.md files of the repository.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != repoRoot && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func rel(path string) string {
	if r, err := filepath.Rel(repoRoot, path); err == nil {
		return filepath.ToSlash(r)
	}
	return path
}

// inlineLink matches [text](target) and ![alt](target); the target ends at
// a space (a title follows) or the closing parenthesis.
var inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(<?([^)\s>]+)>?(?:\s+"[^"]*")?\)`)

// relativeLinks returns the link targets of a Markdown document that point
// into the repository: not URLs, not mail, outside code blocks and spans.
func relativeLinks(data []byte) []string {
	var out []string
	for _, line := range proseLines(data) {
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			out = append(out, target)
		}
	}
	return out
}

// proseLines returns the lines of data outside fenced code blocks, with
// inline code spans blanked.
func proseLines(data []byte) []string {
	var out []string
	fence := ""
	for line := range strings.SplitSeq(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		out = append(out, codeSpan.ReplaceAllString(line, "``"))
	}
	return out
}

var codeSpan = regexp.MustCompile("`[^`]*`")

// headingAnchors returns the anchors GitHub gives the headings of a
// document: the text lower-cased, without punctuation (letters, digits,
// spaces, hyphens and underscores stay), spaces made hyphens; a repeated
// anchor gets -1, -2, ….
func headingAnchors(data []byte) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range proseLines(data) {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimLeft(line, "#")
		if text == "" || text[0] != ' ' {
			continue
		}
		text = strings.TrimSpace(strings.ReplaceAll(line[len(line)-len(text):], "`", ""))
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// section returns the text of data from the line heading to the next
// heading of the same or a higher level.
func section(data []byte, heading string) string {
	text := string(data)
	start := strings.Index(text, "\n"+heading+"\n")
	if start < 0 {
		return ""
	}
	body := text[start+len(heading)+2:]
	level := strings.Repeat("#", strings.Count(strings.Fields(heading)[0], "#"))
	for i := 1; i <= len(level); i++ {
		if end := strings.Index(body, "\n"+strings.Repeat("#", i)+" "); end >= 0 {
			body = body[:end]
		}
	}
	return body
}
