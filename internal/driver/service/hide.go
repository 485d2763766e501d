package service

import (
	"path/filepath"
	"strings"
)

// HiddenBy returns the path of hidden that path is, or is inside, or "".
func HiddenBy(path string, hidden []string) string {
	for _, h := range hidden {
		if Within(path, h) {
			return h
		}
	}
	return ""
}

// Within reports whether path is dir or inside it (both clean and absolute).
func Within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
