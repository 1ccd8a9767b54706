package bundle

import (
	"fmt"
	"path"
	"strings"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// ResolvePath joins an entry's path strictly under the env's KV prefix (the token may read others);
// empty, dot-only, absolute, "..", \, NUL, control, "?" or "#" is a MANIFEST_PATH refusal.
func ResolvePath(prefix, p string) (string, error) {
	if why := badManifestPath(p); why != "" {
		return "", protocol.Refuse(protocol.CodeManifestPath, "path %q: %s", p, why)
	}
	base := strings.Trim(path.Clean("/"+prefix), "/")
	rel := strings.TrimPrefix(path.Clean("/"+p), "/")
	if rel == "" {
		return "", protocol.Refuse(protocol.CodeManifestPath, "path %q: names the prefix itself, not a secret under it", p)
	}
	if base == "" {
		return rel, nil
	}
	return base + "/" + rel, nil
}

func badManifestPath(p string) string {
	switch {
	case strings.TrimSpace(p) == "":
		return "empty"
	case strings.HasPrefix(p, "/"):
		return "absolute; it must be relative to the prefix"
	case strings.ContainsRune(p, '\\'):
		return `contains "\"`
	case strings.ContainsRune(p, 0):
		return "contains NUL"
	case strings.ContainsAny(p, "?#"):
		// would end the path part of the KV URL
		return `contains "?" or "#"`
	}
	for i := 0; i < len(p); i++ {
		if p[i] < 0x20 || p[i] == 0x7f {
			return "contains a control character"
		}
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return `has a ".." segment; it must stay under the prefix`
		}
	}
	return ""
}

// ResolveManifest resolves every entry up front: one refusal and the caller reads nothing.
func (b *Bundle) ResolveManifest(prefix string) ([]string, error) {
	out := make([]string, 0, len(b.Entries))
	for i, e := range b.Entries {
		full, err := ResolvePath(prefix, e.Path)
		if err != nil {
			r := err.(*protocol.Refusal)
			return nil, protocol.Refuse(r.Code, "%s: entries[%d]%s: %s", ManifestFile, i, varLabel(e), r.Detail)
		}
		out = append(out, full)
	}
	return out, nil
}

func varLabel(e Entry) string {
	if e.Var == "" {
		return fmt.Sprintf(" (%s)", e.Use)
	}
	return fmt.Sprintf(" (%s)", e.Var)
}
