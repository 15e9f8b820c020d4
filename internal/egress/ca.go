package egress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// CA is the installation's egress certificate authority: the proxy issues from it the leaf
// certificates with which it terminates TLS to hosts a secret is bound to, and sandboxes
// trust its certificate (never its key, which stays on the gateway).
type CA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     *ecdsa.PrivateKey
	now     func() time.Time

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// CA files in the folder LoadOrCreateCA keeps them in.
const (
	caCertFile = "egress-ca.pem"
	caKeyFile  = "egress-ca-key.pem"
)

// caValidity is how long a generated CA is valid; leafValidity how long an issued leaf is,
// reissued a day before it ends.
const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 7 * 24 * time.Hour
)

// LoadOrCreateCA reads the CA kept in dir (egress-ca.pem and egress-ca-key.pem), or creates
// one (an ECDSA P-256 key, valid ten years, named after installation) and writes it there,
// the key with mode 0600. now is the clock (nil: time.Now).
//
// Errors: the folder cannot be made or read; only one of the two files exists; they do not
// hold a CA certificate and its key.
//
// Processes sharing dir agree on one CA: the key and certificate are written to temporary
// files and linked into place (a link never replaces a file), the key first; a process that
// finds the key without its certificate waits for it (up to caWait).
func LoadOrCreateCA(dir, installation string, now func() time.Time) (*CA, error) {
	if now == nil {
		now = time.Now
	}
	certPath, keyPath := filepath.Join(dir, caCertFile), filepath.Join(dir, caKeyFile)
	created := false
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		certPEM, cerr := os.ReadFile(certPath)
		keyPEM, kerr := os.ReadFile(keyPath)
		switch {
		case cerr == nil && kerr == nil:
			return parseCA(certPEM, keyPEM, now)
		case cerr != nil && !errors.Is(cerr, fs.ErrNotExist):
			return nil, fmt.Errorf("egress CA: %w", cerr)
		case kerr != nil && !errors.Is(kerr, fs.ErrNotExist):
			return nil, fmt.Errorf("egress CA: %w", kerr)
		case errors.Is(cerr, fs.ErrNotExist) && errors.Is(kerr, fs.ErrNotExist) && !created:
			if err := createCA(dir, installation, now()); err != nil {
				return nil, err
			}
			created = true
			continue
		}
		if time.Since(start) > caWait {
			return nil, fmt.Errorf("egress CA: only one of %s and %s exists in %s: restore the other or remove both to make a new CA (sandboxes started before then stop trusting the proxy)", caCertFile, caKeyFile, dir)
		}
	}
}

// caWait bounds how long LoadOrCreateCA waits for a certificate another process is writing.
const caWait = 5 * time.Second

// createCA makes a CA in dir unless another process has already linked its key there.
func createCA(dir, installation string, now time.Time) error {
	certPEM, keyPEM, err := newCA(installation, now)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("egress CA: %w", err)
	}
	keyTmp, err := writeTemp(dir, keyPEM, 0o600)
	if err != nil {
		return err
	}
	defer os.Remove(keyTmp)
	certTmp, err := writeTemp(dir, certPEM, 0o644)
	if err != nil {
		return err
	}
	defer os.Remove(certTmp)
	if err := os.Link(keyTmp, filepath.Join(dir, caKeyFile)); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil // another process's CA: read it
		}
		return fmt.Errorf("egress CA: %w", err)
	}
	if err := os.Link(certTmp, filepath.Join(dir, caCertFile)); err != nil {
		return fmt.Errorf("egress CA: %w", err)
	}
	return nil
}

func writeTemp(dir string, b []byte, mode os.FileMode) (string, error) {
	f, err := os.CreateTemp(dir, ".egress-ca-*")
	if err != nil {
		return "", fmt.Errorf("egress CA: %w", err)
	}
	name := f.Name()
	err = f.Chmod(mode)
	if err == nil {
		_, err = f.Write(b)
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(name)
		return "", fmt.Errorf("egress CA: %w", err)
	}
	return name, nil
}

func newCA(installation string, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("egress CA: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("egress CA: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "Sandgate egress CA " + installation, Organization: []string{"Sandgate"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("egress CA: %w", err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("egress CA: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

func parseCA(certPEM, keyPEM []byte, now func() time.Time) (*CA, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok || !cert.IsCA {
		return nil, fmt.Errorf("egress CA: the files do not hold an ECDSA CA certificate and its key")
	}
	return &CA{cert: cert, certPEM: certPEM, key: key, now: now, leaves: map[string]*tls.Certificate{}}, nil
}

// CertPEM is the CA's certificate, PEM-encoded: what sandboxes add to their trust.
func (c *CA) CertPEM() []byte { return c.certPEM }

// Leaf returns a certificate for host (a name or an IP address) signed by the CA, reused
// until a day before it expires.
func (c *CA) Leaf(host string) (*tls.Certificate, error) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.leaves[host]; ok && now.Before(l.Leaf.NotAfter.Add(-24*time.Hour)) {
		return l, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(leafValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	l := &tls.Certificate{Certificate: [][]byte{der, c.cert.Raw}, PrivateKey: key, Leaf: leaf}
	c.leaves[host] = l
	return l, nil
}
