package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// The egress forwarder (--egress-dir, SANDBOXD_EGRESS_DIR; issue 39). A sandbox behind the
// gateway's egress proxy has no network but its loopback; sandboxd forwards its loopback's
// HTTP proxy port and DNS to the proxy's two Unix sockets in the egress folder (the
// sandbox's socket folder, bind-mounted by the docker provider), and writes there the trust
// bundle its programs use: the image's system roots and the installation's egress CA.
const (
	egressProxyAddr   = "127.0.0.1:3128"
	egressDNSAddr     = "127.0.0.1:53"
	egressProxySocket = "px.sock"
	egressDNSSocket   = "ns.sock"
	egressCAFile      = "egress-ca.pem"
	egressBundleFile  = "ca-bundle.pem"
	// dnsTimeout bounds one forwarded UDP question.
	dnsTimeout = 10 * time.Second
)

// systemRoots are where images keep their trust bundle (Debian/Ubuntu/Alpine, Fedora/RHEL,
// openSUSE); the first that exists is used.
var systemRoots = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// forwarder is the running egress forwarder; stop ends it.
type forwarder struct {
	ls  []net.Listener
	udp net.PacketConn
	wg  sync.WaitGroup
}

func (f *forwarder) stop() {
	for _, l := range f.ls {
		_ = l.Close()
	}
	if f.udp != nil {
		_ = f.udp.Close()
	}
	f.wg.Wait()
}

// startForwarder writes the trust bundle and starts forwarding; errors are a bundle that
// cannot be written or a port that cannot be bound (the container lacks the
// ip_unprivileged_port_start sysctl for port 53).
func startForwarder(dir string, log *slog.Logger) (*forwarder, error) {
	if err := writeBundle(dir); err != nil {
		return nil, err
	}
	f := &forwarder{}
	for _, t := range []struct{ addr, sock string }{{egressProxyAddr, egressProxySocket}, {egressDNSAddr, egressDNSSocket}} {
		l, err := net.Listen("tcp", t.addr)
		if err != nil {
			f.stop()
			return nil, fmt.Errorf("egress forwarder: %w", err)
		}
		f.ls = append(f.ls, l)
		sock := filepath.Join(dir, t.sock)
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.acceptTCP(l, sock, log)
		}()
	}
	pc, err := net.ListenPacket("udp", egressDNSAddr)
	if err != nil {
		f.stop()
		return nil, fmt.Errorf("egress forwarder: %w", err)
	}
	f.udp = pc
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		f.serveUDP(pc, filepath.Join(dir, egressDNSSocket), log)
	}()
	log.Info("egress forwarder serving", "proxy", egressProxyAddr, "dns", egressDNSAddr, "dir", dir)
	return f, nil
}

// writeBundle writes dir/ca-bundle.pem: the system roots (when the image has some) and
// dir/egress-ca.pem, replacing the file whole.
func writeBundle(dir string) error {
	ca, err := os.ReadFile(filepath.Join(dir, egressCAFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("egress forwarder: reading the egress CA: %w", err)
	}
	var b bytes.Buffer
	for _, p := range systemRoots {
		if roots, err := os.ReadFile(p); err == nil {
			b.Write(roots)
			if len(roots) > 0 && roots[len(roots)-1] != '\n' {
				b.WriteByte('\n')
			}
			break
		}
	}
	b.Write(ca)
	tmp := filepath.Join(dir, fmt.Sprintf(".bundle-%d", os.Getpid()))
	if err := os.WriteFile(tmp, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("egress forwarder: writing the trust bundle: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, egressBundleFile)); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("egress forwarder: writing the trust bundle: %w", err)
	}
	return nil
}

// acceptTCP joins each connection on l to a new connection to Unix socket sock.
func (f *forwarder) acceptTCP(l net.Listener, sock string, log *slog.Logger) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer c.Close()
			u, err := net.Dial("unix", sock)
			if err != nil {
				log.Warn("egress forwarder: the proxy's socket does not answer", "socket", sock, "err", err)
				return
			}
			defer u.Close()
			join(c, u)
		}()
	}
}

// join copies both ways until both directions end.
func join(a, b net.Conn) {
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(b, a)
		closeWrite(b)
		close(done)
	}()
	_, _ = io.Copy(a, b)
	closeWrite(a)
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

// serveUDP answers each DNS question on pc by asking it over the stream socket sock (a
// two-byte length before each message, RFC 1035 §4.2.2).
func (f *forwarder) serveUDP(pc net.PacketConn, sock string, log *slog.Logger) {
	buf := make([]byte, 65535)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		q := append([]byte(nil), buf[:n]...)
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			answer, err := askStream(sock, q)
			if err != nil {
				log.Debug("egress forwarder: DNS question not answered", "err", err)
				return
			}
			_, _ = pc.WriteTo(answer, from)
		}()
	}
}

func askStream(sock string, q []byte) ([]byte, error) {
	c, err := net.DialTimeout("unix", sock, dnsTimeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(dnsTimeout))
	msg := make([]byte, 2+len(q))
	binary.BigEndian.PutUint16(msg, uint16(len(q)))
	copy(msg[2:], q)
	if _, err := c.Write(msg); err != nil {
		return nil, err
	}
	var size [2]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		return nil, err
	}
	answer := make([]byte, binary.BigEndian.Uint16(size[:]))
	if _, err := io.ReadFull(c, answer); err != nil {
		return nil, err
	}
	return answer, nil
}
