package egress

import (
	"context"
	"errors"
	"net"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// ServeDNS answers DNS over a stream (RFC 1035 §4.2.2 framing: a two-byte length before each
// message) on l for grant g until l is closed: A and AAAA questions for names a network_allow
// entry allows get their addresses (egress.hosts first, else the gateway's resolver); other
// questions for such names an empty answer; every other name NXDOMAIN, refused and counted.
func (p *Proxy) ServeDNS(l net.Listener, g *Grant) error {
	srv := &dns.Server{Listener: l, Net: "tcp", Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		_ = w.WriteMsg(p.answer(g, q))
	}), ReadTimeout: time.Minute, WriteTimeout: time.Minute}
	err := srv.ActivateAndServe()
	if err != nil && (errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "use of closed")) {
		return nil
	}
	return err
}

// answer builds the reply to q for g.
func (p *Proxy) answer(g *Grant, q *dns.Msg) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(q)
	m.RecursionAvailable = true
	if q.Opcode != dns.OpcodeQuery || len(q.Question) != 1 {
		m.Rcode = dns.RcodeRefused
		return m
	}
	qq := q.Question[0]
	name := NormalizeHost(qq.Name)
	if qq.Qclass != dns.ClassINET || !(g.AllowAll || g.Rules.AllowsName(name)) {
		p.refuse(g, "dns", name, 0, "no network_allow entry allows the name")
		m.Rcode = dns.RcodeNameError
		return m
	}
	p.requests.WithLabelValues("dns", "allowed").Inc()
	if qq.Qtype != dns.TypeA && qq.Qtype != dns.TypeAAAA {
		return m
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addrs, err := p.lookup(ctx, name)
	if err != nil {
		var de *net.DNSError
		if errors.As(err, &de) && de.IsNotFound {
			m.Rcode = dns.RcodeNameError
		} else {
			m.Rcode = dns.RcodeServerFailure
		}
		return m
	}
	for _, a := range addrs {
		a = a.Unmap()
		hdr := dns.RR_Header{Name: qq.Name, Class: dns.ClassINET, Ttl: 30}
		switch {
		case qq.Qtype == dns.TypeA && a.Is4():
			hdr.Rrtype = dns.TypeA
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: net.IP(a.AsSlice())})
		case qq.Qtype == dns.TypeAAAA && a.Is6():
			hdr.Rrtype = dns.TypeAAAA
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: net.IP(a.AsSlice())})
		}
	}
	return m
}
