package token

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"
	"unicode"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/atomicfile"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/capread"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

// MaxFile bounds what is read of the token and the bootstrap grant files: a token is a few
// hundred bytes, a grant a few KiB.
const MaxFile = 64 << 10

// ReadFile reads the token or the bootstrap grant file: only a regular file (capread.File: a
// FIFO in its place cannot hang a tick; a symlink an operator made is followed) of at most
// MaxFile bytes. The error never quotes the file.
func ReadFile(path string) ([]byte, error) {
	return capread.File(path, MaxFile, nil)
}

// Read returns the token at path, whitespace trimmed; a missing file is empty, no error.
func Read(path string) (secret.Value, error) {
	data, err := ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return secret.Value{}, nil
	}
	if err != nil {
		return secret.Value{}, fmt.Errorf("state: read token %s: %w", path, err)
	}
	return secret.New(strings.TrimSpace(string(data))), nil
}

// Write stores tok at path atomically, 0600, newline-terminated; empty or whitespace/control tokens
// are refused (Remove forgets one). The error never contains the token.
func Write(path string, tok secret.Value) error {
	v := tok.Reveal()
	if v == "" {
		return fmt.Errorf("state: write token %s: empty token", path)
	}
	if strings.IndexFunc(v, func(c rune) bool { return unicode.IsSpace(c) || unicode.IsControl(c) }) >= 0 {
		return fmt.Errorf("state: write token %s: token contains whitespace or a control character", path)
	}
	if err := atomicfile.WriteFile(path, []byte(v+"\n"), 0o600); err != nil {
		return fmt.Errorf("state: write token: %w", err)
	}
	return nil
}

// Remove deletes the token file; a missing file is not an error.
func Remove(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("state: remove token: %w", err)
	}
	return nil
}

// Supersede moves the token aside to path+".superseded" (0600, mtime now) as evidence of which
// token was refused, and returns where ("" when there was none).
func Supersede(path string, now time.Time) (string, error) {
	dst := path + SupersededSuffix
	if err := os.Rename(path, dst); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		return "", fmt.Errorf("state: move the refused token aside: %w", err)
	}
	// The file was 0600 as written; a token put there by hand need not have been.
	if err := os.Chmod(dst, 0o600); err != nil {
		return dst, fmt.Errorf("state: chmod %s: %w", dst, err)
	}
	if err := os.Chtimes(dst, now, now); err != nil {
		return dst, fmt.Errorf("state: touch %s: %w", dst, err)
	}
	return dst, nil
}

// SupersededSuffix names the file a refused token is kept in, beside the token file.
const SupersededSuffix = ".superseded"
