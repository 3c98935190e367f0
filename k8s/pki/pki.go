// Package pki writes what a loopback control plane needs to run with TLS and client certificates, as kubeadm's
// "certs" phase does for a real one: one CA, the API server's serving certificate, client certificates for the
// cluster admin and the two control-plane components, and the service-account signing key pair.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Validity of every certificate: a local cluster lives for days, but a laptop's clock may be off by hours.
const Validity = 365 * 24 * time.Hour

// ServiceIP is the first address of the service range the API server is started with (10.0.0.0/24): the
// `kubernetes` Service's ClusterIP, which the serving certificate must name.
var ServiceIP = net.ParseIP("10.0.0.1")

// Client is one client certificate: its file stem, user (CN) and groups (O).
type Client struct {
	Stem   string
	User   string
	Groups []string
}

// Clients are the identities the cluster's processes authenticate as (RBAC's bootstrap roles name them).
var Clients = []Client{
	{"admin", "kubernetes-admin", []string{"system:masters"}},
	{"controller-manager", "system:kube-controller-manager", nil},
	{"scheduler", "system:kube-scheduler", nil},
}

// Write creates DIR (0700) and the files ca.{crt,key}, apiserver.{crt,key}, <client>.{crt,key}, sa.{key,pub}.
func Write(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	now := time.Now().Add(-time.Hour)
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTemplate := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "gpudra-local-ca"},
		NotBefore:             now,
		NotAfter:              now.Add(Validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, caKey.Public(), caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	if err := writePair(dir, "ca", caDER, caKey); err != nil {
		return err
	}
	serving := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now,
		NotAfter:     now.Add(Validity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1"), ServiceIP},
	}
	if err := issue(dir, "apiserver", serving, ca, caKey); err != nil {
		return err
	}
	for _, c := range Clients {
		template := &x509.Certificate{
			SerialNumber: serial(),
			Subject:      pkix.Name{CommonName: c.User, Organization: c.Groups},
			NotBefore:    now,
			NotAfter:     now.Add(Validity),
			KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}
		if err := issue(dir, c.Stem, template, ca, caKey); err != nil {
			return err
		}
	}
	// service-account tokens are RSA-signed (RS256) by default
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(saKey)
	if err != nil {
		return err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, "sa.key"), "PRIVATE KEY", keyDER); err != nil {
		return err
	}
	return writePEM(filepath.Join(dir, "sa.pub"), "PUBLIC KEY", pubDER)
}

func issue(dir, stem string, template, ca *x509.Certificate, caKey crypto.Signer) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca, key.Public(), caKey)
	if err != nil {
		return fmt.Errorf("%s certificate: %w", stem, err)
	}
	return writePair(dir, stem, der, key)
}

func writePair(dir, stem string, certDER []byte, key crypto.Signer) error {
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, stem+".crt"), "CERTIFICATE", certDER); err != nil {
		return err
	}
	return writePEM(filepath.Join(dir, stem+".key"), "PRIVATE KEY", keyDER)
}

func writePEM(path, kind string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		panic(err)
	}
	return n
}
