// Command doclinks checks that every relative link in the repository's
// Markdown files points at a tracked file or directory, that every
// #anchor into a Markdown file names one of its headings, and that every
// decision the code and docs cite as "docs/design.md [name]" is a heading
// "## [name] …" of docs/design.md. Docs move; a link that silently stops
// resolving is how a reader gets lost, so scripts/docs-budget.sh (make
// docs-check, part of make lint) runs it.
//
// Usage: go run ./internal/doclinks [file.md ...] (default: every tracked
// .md file, from git ls-files). It exits 1 and lists each broken link.
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path"
	"regexp"
	"sort"
	"strings"
	"unicode"
)

func main() {
	tracked, err := gitFiles()
	if err != nil {
		fmt.Fprintln(os.Stderr, "doclinks:", err)
		os.Exit(2)
	}
	files := os.Args[1:]
	if len(files) == 0 {
		for _, f := range tracked {
			if strings.HasSuffix(f, ".md") {
				files = append(files, f)
			}
		}
	}
	problems, err := check(os.DirFS("."), tracked, files)
	if err != nil {
		fmt.Fprintln(os.Stderr, "doclinks:", err)
		os.Exit(2)
	}
	cited, err := citations(os.DirFS("."), tracked)
	if err != nil {
		fmt.Fprintln(os.Stderr, "doclinks:", err)
		os.Exit(2)
	}
	problems = append(problems, cited...)
	for _, p := range problems {
		fmt.Println(p)
	}
	if len(problems) > 0 {
		fmt.Printf("doclinks: %d broken links or citations (%d Markdown files checked)\n", len(problems), len(files))
		os.Exit(1)
	}
	fmt.Printf("doclinks: every relative link of %d Markdown files resolves, every cited decision exists\n", len(files))
}

// gitFiles lists the tracked files: a link must resolve in a fresh clone,
// not only in a work tree holding generated output.
func gitFiles() ([]string, error) {
	out, err := exec.Command("git", "ls-files", "-z").Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %w", err)
	}
	var files []string
	for _, f := range bytes.Split(out, []byte{0}) {
		if len(f) > 0 {
			files = append(files, string(f))
		}
	}
	return files, nil
}

// A link is one link target found in a Markdown file.
type link struct {
	line   int
	target string
}

var (
	inlineLink = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refDef     = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$`)
	codeSpan   = regexp.MustCompile("`+[^`]*`+")
	heading    = regexp.MustCompile(`^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	scheme     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// links returns the link targets of a Markdown document, outside fenced
// code blocks and code spans.
func links(r io.Reader) ([]link, error) {
	var out []link
	err := proseLines(r, func(n int, line string) {
		line = codeSpan.ReplaceAllString(line, "")
		if m := refDef.FindStringSubmatch(line); m != nil {
			out = append(out, link{n, m[1]})
			return
		}
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			out = append(out, link{n, m[1]})
		}
	})
	return out, err
}

// proseLines calls f with each line of a Markdown document, numbered from
// 1, outside fenced code blocks.
func proseLines(r io.Reader, f func(n int, line string)) error {
	fence := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " ")
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
		f(n, line)
	}
	return sc.Err()
}

// anchors returns the anchors GitHub gives a Markdown document's headings
// (and any explicit <a name> or id), as a set.
func anchors(r io.Reader) (map[string]bool, error) {
	set := map[string]bool{}
	seen := map[string]int{}
	err := proseLines(r, func(_ int, line string) {
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			set[m[1]] = true
		}
		m := heading.FindStringSubmatch(line)
		if m == nil {
			return
		}
		s := slug(m[1])
		if k := seen[s]; k > 0 {
			set[fmt.Sprintf("%s-%d", s, k)] = true
		} else {
			set[s] = true
		}
		seen[s]++
	})
	return set, err
}

var mdLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// slug is GitHub's anchor for a heading: the text without its Markdown
// (links become their text), lower case, every character but letters,
// digits, spaces, hyphens and underscores dropped, spaces turned to
// hyphens.
func slug(h string) string {
	h = mdLink.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// check returns one line per broken relative link in files, read from
// fsys; tracked lists the files a link may point at (a directory is the
// prefix of a tracked path).
func check(fsys fs.FS, tracked, files []string) ([]string, error) {
	exists := map[string]bool{".": true}
	for _, f := range tracked {
		for p := f; p != "." && !exists[p]; p = path.Dir(p) {
			exists[p] = true
		}
	}
	headings := map[string]map[string]bool{}
	anchorsOf := func(name string) (map[string]bool, error) {
		if a, ok := headings[name]; ok {
			return a, nil
		}
		f, err := fsys.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		a, err := anchors(f)
		headings[name] = a
		return a, err
	}
	var problems []string
	for _, name := range files {
		f, err := fsys.Open(name)
		if err != nil {
			return nil, err
		}
		ls, err := links(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		for _, l := range ls {
			if scheme.MatchString(l.target) || strings.HasPrefix(l.target, "//") {
				continue // a URL: not checked offline
			}
			p, frag, _ := strings.Cut(l.target, "#")
			if u, err := url.PathUnescape(p); err == nil {
				p = u
			}
			target := name
			if p != "" {
				if strings.HasPrefix(p, "/") {
					target = path.Clean(strings.TrimPrefix(p, "/"))
				} else {
					target = path.Join(path.Dir(name), p)
				}
				if !exists[target] {
					problems = append(problems, fmt.Sprintf("%s:%d: %s: no such tracked file or directory %s", name, l.line, l.target, target))
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(target, ".md") {
				continue
			}
			a, err := anchorsOf(target)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", target, err)
			}
			if !a[frag] {
				problems = append(problems, fmt.Sprintf("%s:%d: %s: %s has no heading with anchor #%s", name, l.line, l.target, target, frag))
			}
		}
	}
	sort.Strings(problems)
	return problems, nil
}

// designDoc is the design document whose decisions are cited by name.
const designDoc = "docs/design.md"

var (
	// "docs/design.md [name]" or "[name] in docs/design.md", also with the
	// path as a Markdown link; a Go comment may wrap between the two.
	citeAfter    = regexp.MustCompile(`design\.md\)?\s*\[([a-z][a-z-]*)\]`)
	citeBefore   = regexp.MustCompile(`\[([a-z][a-z-]*)\] in \[?(?:\.\./)*docs/design\.md`)
	commentWrap  = regexp.MustCompile(`\n\s*(//\s*)?`)
	decisionHead = regexp.MustCompile(`(?m)^## \[([a-z][a-z-]*)\]`)
)

// citations returns one line per citation of a decision of designDoc, in
// the tracked .go and .md files, that designDoc has no heading for.
func citations(fsys fs.FS, tracked []string) ([]string, error) {
	doc, err := fs.ReadFile(fsys, designDoc)
	if err != nil {
		return nil, err
	}
	decisions := map[string]bool{}
	for _, m := range decisionHead.FindAllSubmatch(doc, -1) {
		decisions[string(m[1])] = true
	}
	var problems []string
	for _, name := range tracked {
		if name == designDoc || strings.HasPrefix(name, "internal/doclinks/") ||
			!(strings.HasSuffix(name, ".go") || strings.HasSuffix(name, ".md")) {
			continue
		}
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		text := commentWrap.ReplaceAllString(string(b), " ")
		seen := map[string]bool{}
		for _, re := range []*regexp.Regexp{citeAfter, citeBefore} {
			for _, m := range re.FindAllStringSubmatch(text, -1) {
				if d := m[1]; !decisions[d] && !seen[d] {
					seen[d] = true
					problems = append(problems, fmt.Sprintf("%s: cites %s [%s], which has no heading ## [%s]", name, designDoc, d, d))
				}
			}
		}
	}
	sort.Strings(problems)
	return problems, nil
}
