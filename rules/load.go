package rules

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Load reads the rules of every path: a file, or a directory whose *.yaml
// and *.yml files (not those whose name starts with a dot, and not in
// subdirectories) are read in name order, as envoyproxy/ratelimit reads
// its runtime directory. Every domain must be defined once across all of
// them. Errors name the path as given.
func Load(paths ...string) (*Set, error) {
	files, err := Files(paths...)
	if err != nil {
		return nil, err
	}
	var ds []*domain
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, &ConfigError{File: f, Msg: readError(err)}
		}
		fds, err := parseFile(f, data)
		if err != nil {
			return nil, err
		}
		ds = append(ds, fds...)
	}
	return newSet(ds)
}

// Files returns the rule files that Load(paths...) reads, in that order.
func Files(paths ...string) ([]string, error) {
	if len(paths) == 0 {
		return nil, &ConfigError{File: "(none)", Msg: "no rules file given"}
	}
	var files []string
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil {
			return nil, &ConfigError{File: p, Msg: readError(err)}
		}
		if !info.IsDir() {
			files = append(files, p)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			return nil, &ConfigError{File: p, Msg: readError(err)}
		}
		var found []string
		for _, e := range entries {
			name := e.Name()
			if strings.HasPrefix(name, ".") || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
				continue
			}
			// A ConfigMap mounts each key as a symlink: follow it, skip directories.
			if st, err := os.Stat(filepath.Join(p, name)); err == nil && st.IsDir() {
				continue
			}
			found = append(found, filepath.Join(p, name))
		}
		if len(found) == 0 {
			return nil, &ConfigError{File: p, Msg: "the directory has no *.yaml or *.yml file"}
		}
		slices.Sort(found)
		files = append(files, found...)
	}
	return files, nil
}

// readError shortens an *os.PathError, whose path the ConfigError names already.
func readError(err error) string {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Op + ": " + pe.Err.Error()
	}
	return err.Error()
}
