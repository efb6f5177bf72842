package main

import (
	"net/url"
	"strings"
)

// redact hides passwords in a URL, a comma-separated list of URLs, or a
// libpq keyword/value string (host=… password=…), for logs.
func redact(urls string) string {
	if isKeywordDSN(urls) {
		return redactKeywordDSN(urls)
	}
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil {
			parts[i] = "<unparsable>"
			continue
		}
		if u.User != nil {
			if _, has := u.User.Password(); has {
				u.User = url.UserPassword(u.User.Username(), "xxxxx")
			}
		}
		q := u.Query()
		for k := range q {
			if lk := strings.ToLower(k); lk == "password" || lk == "sslpassword" {
				q.Set(k, "xxxxx")
			}
		}
		u.RawQuery = q.Encode()
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}

// isKeywordDSN reports whether s is a libpq keyword/value connection
// string ("host=db user=u password=…") rather than a URL: no scheme, and
// its first word is key=value.
func isKeywordDSN(s string) bool {
	s = strings.TrimSpace(s)
	first, _, _ := strings.Cut(s, " ")
	return !strings.Contains(s, "://") && strings.Contains(first, "=")
}

// redactKeywordDSN replaces the values of password and sslpassword in a
// libpq keyword/value string by xxxxx. Values are read as libpq reads
// them: up to white space, or between single quotes with \' and \\
// escaped; "key = value" may have spaces around the "=".
func redactKeywordDSN(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		// white space, then the key up to "=" or white space
		j := i
		for j < len(s) && (s[j] == ' ' || s[j] == '\t' || s[j] == '\n' || s[j] == '\r') {
			j++
		}
		k := j
		for k < len(s) && s[k] != '=' && s[k] != ' ' && s[k] != '\t' && s[k] != '\n' && s[k] != '\r' {
			k++
		}
		key := s[j:k]
		for k < len(s) && (s[k] == ' ' || s[k] == '\t') {
			k++
		}
		if k >= len(s) || s[k] != '=' {
			b.WriteString(s[i:k])
			i = k
			if k < len(s) {
				b.WriteByte(s[k])
				i++
			}
			continue
		}
		k++ // "="
		for k < len(s) && (s[k] == ' ' || s[k] == '\t') {
			k++
		}
		v := k // the value: quoted or up to white space
		if v < len(s) && s[v] == '\'' {
			v++
			for v < len(s) && s[v] != '\'' {
				if s[v] == '\\' {
					v++
				}
				v++
			}
			v = min(v+1, len(s))
		} else {
			for v < len(s) && s[v] != ' ' && s[v] != '\t' && s[v] != '\n' && s[v] != '\r' {
				v++
			}
		}
		b.WriteString(s[i:k])
		if lk := strings.ToLower(key); lk == "password" || lk == "sslpassword" {
			b.WriteString("xxxxx")
		} else {
			b.WriteString(s[k:v])
		}
		i = v
	}
	return b.String()
}
