// Package grant mints and checks the ES256 deploy grants that OpenBao's `jwt-tenancy` mount turns
// into agent tokens: tenancy signs them (the install kit's bootstrap grant and every lease's
// login_jwt), and the in-process fakes of tenancy and OpenBao use this package to do the same.
package grant

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// The fixed claims of a deploy grant. OpenBao's see-env role binds the audience and `kind`
// (bound_audiences / bound_claims), so a grant minted for anything else cannot log in.
const (
	Audience      = "openbao-see-env"
	Kind          = "deploy-grant"
	SubjectPrefix = "agent:"
	Algorithm     = "ES256"
)

// ErrInvalid is wrapped by every Verify failure.
var ErrInvalid = errors.New("grant: invalid deploy grant")

// Claims are the claims of a deploy grant. ID is the `jti`: OpenBao copies it into the token's
// metadata as `grant_jti`, which is how tenancy refuses a token whose grant a kit re-reveal
// superseded (the jwt mount itself keeps no replay state).
type Claims struct {
	Issuer    string
	Audience  []string
	Subject   string
	EnvID     string
	Kind      string
	ID        string
	IssuedAt  time.Time
	ExpiresAt time.Time
}

type wireClaims struct {
	jwt.RegisteredClaims
	EnvID string `json:"env_id"`
	Kind  string `json:"kind"`
}

// Signer mints deploy grants with one P-256 key. Clock is read at every Sign; nil means the
// wall clock.
type Signer struct {
	Key    *ecdsa.PrivateKey
	Issuer string
	Clock  func() time.Time
}

// NewSigner returns a Signer with a fresh P-256 key.
func NewSigner(issuer string) (*Signer, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("grant: generate key: %w", err)
	}
	return &Signer{Key: k, Issuer: issuer, Clock: time.Now}, nil
}

func (s *Signer) now() time.Time {
	if s.Clock == nil {
		return time.Now()
	}
	return s.Clock()
}

// Sign mints a grant for envID valid for ttl and returns it with its random jti.
func (s *Signer) Sign(envID string, ttl time.Duration) (token, jti string, err error) {
	if envID == "" {
		return "", "", errors.New("grant: sign: empty env_id")
	}
	if ttl <= 0 {
		return "", "", fmt.Errorf("grant: sign %s: ttl %s is not positive", envID, ttl)
	}
	if s.Key == nil {
		return "", "", errors.New("grant: sign: signer has no key")
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("grant: sign %s: jti: %w", envID, err)
	}
	jti = hex.EncodeToString(b[:])
	now := s.now()
	c := wireClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    s.Issuer,
			Audience:  jwt.ClaimStrings{Audience},
			Subject:   SubjectPrefix + envID,
			ID:        jti,
			IssuedAt:  jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
		},
		EnvID: envID,
		Kind:  Kind,
	}
	token, err = jwt.NewWithClaims(jwt.SigningMethodES256, c).SignedString(s.Key)
	if err != nil {
		return "", "", fmt.Errorf("grant: sign %s: %w", envID, err)
	}
	return token, jti, nil
}

// PublicKey returns the key that verifies this Signer's grants.
func (s *Signer) PublicKey() *ecdsa.PublicKey { return &s.Key.PublicKey }

// PublicKeyPEM returns the verifying key as a PKIX "PUBLIC KEY" PEM block, the form OpenBao's
// `jwt_validation_pubkeys` takes.
func (s *Signer) PublicKeyPEM() string {
	der, err := x509.MarshalPKIXPublicKey(&s.Key.PublicKey)
	if err != nil {
		// A P-256 key always marshals; anything else is a broken Signer.
		panic(fmt.Sprintf("grant: marshal public key: %v", err))
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

// ParsePublicKeyPEM reads a PKIX "PUBLIC KEY" PEM holding an ECDSA P-256 key.
func ParsePublicKeyPEM(s string) (*ecdsa.PublicKey, error) {
	blk, _ := pem.Decode([]byte(s))
	if blk == nil || blk.Type != "PUBLIC KEY" {
		return nil, errors.New("grant: public key: no PUBLIC KEY PEM block")
	}
	k, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("grant: public key: %w", err)
	}
	ek, ok := k.(*ecdsa.PublicKey)
	if !ok || ek.Curve != elliptic.P256() {
		return nil, errors.New("grant: public key: not an ECDSA P-256 key")
	}
	return ek, nil
}

// Verify checks a grant the way OpenBao's see-env role does: ES256 signature by pub, audience
// openbao-see-env, kind deploy-grant, an expiry after now, and a subject that names its env_id.
// Errors wrap ErrInvalid and never contain the token.
func Verify(token string, pub *ecdsa.PublicKey, now time.Time) (Claims, error) {
	if pub == nil {
		return Claims{}, fmt.Errorf("%w: no verifying key", ErrInvalid)
	}
	var wc wireClaims
	_, err := jwt.ParseWithClaims(token, &wc, func(*jwt.Token) (any, error) { return pub, nil },
		jwt.WithValidMethods([]string{Algorithm}),
		jwt.WithAudience(Audience),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(func() time.Time { return now }),
	)
	if err != nil {
		return Claims{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if wc.Kind != Kind {
		return Claims{}, fmt.Errorf("%w: kind %q is not %q", ErrInvalid, wc.Kind, Kind)
	}
	if wc.EnvID == "" {
		return Claims{}, fmt.Errorf("%w: no env_id", ErrInvalid)
	}
	if wc.Subject != SubjectPrefix+wc.EnvID {
		return Claims{}, fmt.Errorf("%w: subject %q does not name env_id %q", ErrInvalid, wc.Subject, wc.EnvID)
	}
	c := Claims{
		Issuer:   wc.Issuer,
		Audience: []string(wc.Audience),
		Subject:  wc.Subject,
		EnvID:    wc.EnvID,
		Kind:     wc.Kind,
		ID:       wc.ID,
	}
	if wc.IssuedAt != nil {
		c.IssuedAt = wc.IssuedAt.Time
	}
	if wc.ExpiresAt != nil {
		c.ExpiresAt = wc.ExpiresAt.Time
	}
	return c, nil
}
