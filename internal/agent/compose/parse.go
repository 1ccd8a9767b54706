package compose

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/clip"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// ParseInfo reads `docker info --format '{{json .}}'`; unreported fields stay empty, a server
// error in the document is an error.
func ParseInfo(b []byte) (Info, error) {
	var raw struct {
		DockerRootDir string   `json:"DockerRootDir"`
		ServerVersion string   `json:"ServerVersion"`
		ServerErrors  []string `json:"ServerErrors"`
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return Info{}, fmt.Errorf("compose: docker info: output is not a JSON object: %q", clip.Head(string(b), 80))
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return Info{}, fmt.Errorf("compose: docker info: %w", err)
	}
	if len(raw.ServerErrors) > 0 {
		return Info{}, fmt.Errorf("compose: docker info: server error: %s", strings.Join(raw.ServerErrors, "; "))
	}
	return Info{DockerRootDir: raw.DockerRootDir, ServerVersion: raw.ServerVersion}, nil
}

// psEntry is what the agent reads of a `compose ps --format json` entry.
type psEntry struct {
	Service string `json:"Service"`
	Name    string `json:"Name"`
	State   string `json:"State"`
	Health  string `json:"Health"`
	// Labels is `k=v,k=v` (compose ≥ 2.21, docker's container formatter, in no order); older
	// compose has none, and no config hash is read then.
	Labels json.RawMessage `json:"Labels"`
}

// ConfigHashLabel is the label compose stamps on each container with its service's config hash.
const ConfigHashLabel = "com.docker.compose.config-hash"

// configHash reads the config hash out of ps's Labels: a comma-joined string (a map in case a
// compose prints one). A label value may itself hold ",com.docker.compose.config-hash=…", so a
// hash found twice, or not as 64 hex digits, is unknown ("") rather than guessed.
func configHash(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var m map[string]string
	if json.Unmarshal(raw, &m) == nil {
		return hexHash(m[ConfigHashLabel])
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	found := ""
	n := 0
	for _, kv := range strings.Split(s, ",") {
		if v, ok := strings.CutPrefix(kv, ConfigHashLabel+"="); ok {
			found, n = v, n+1
		}
	}
	if n != 1 {
		return ""
	}
	return hexHash(found)
}

func hexHash(h string) string {
	if len(h) != 64 {
		return ""
	}
	for _, r := range h {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return ""
		}
	}
	return h
}

// ParsePs reads `docker compose ps -a --format json`, a JSON array (before 2.21) or NDJSON. No
// output is an empty non-nil slice; entries need Service, Name and State (lowercased with Health).
func ParsePs(b []byte) ([]protocol.Container, error) {
	b = bytes.TrimSpace(b)
	out := []protocol.Container{}
	if len(b) == 0 {
		return out, nil
	}
	var raws []json.RawMessage
	if b[0] == '[' {
		if err := json.Unmarshal(b, &raws); err != nil {
			return nil, fmt.Errorf("compose: ps: %w", err)
		}
	} else {
		dec := json.NewDecoder(bytes.NewReader(b))
		for {
			var raw json.RawMessage
			err := dec.Decode(&raw)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("compose: ps: entry %d: %w", len(raws)+1, err)
			}
			raws = append(raws, raw)
		}
	}
	for i, raw := range raws {
		raw = bytes.TrimSpace(raw)
		if len(raw) == 0 || raw[0] != '{' {
			return nil, fmt.Errorf("compose: ps: entry %d: not a JSON object", i+1)
		}
		var e psEntry
		if err := json.Unmarshal(raw, &e); err != nil {
			return nil, fmt.Errorf("compose: ps: entry %d: %w", i+1, err)
		}
		c := protocol.Container{
			Service:    strings.TrimSpace(e.Service),
			Name:       strings.TrimSpace(e.Name),
			State:      strings.ToLower(strings.TrimSpace(e.State)),
			Health:     strings.ToLower(strings.TrimSpace(e.Health)),
			ConfigHash: configHash(e.Labels),
		}
		switch {
		case c.Name == "":
			return nil, fmt.Errorf("compose: ps: entry %d: missing Name", i+1)
		case c.Service == "":
			return nil, fmt.Errorf("compose: ps: entry %d (%s): missing Service", i+1, c.Name)
		case c.State == "":
			return nil, fmt.Errorf("compose: ps: entry %d (%s): missing State", i+1, c.Name)
		}
		out = append(out, c)
	}
	return out, nil
}
