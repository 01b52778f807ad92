// hostpathplugin-proxy stands in for the proxy mode of csi-driver-host-path's hostpathplugin
// (registry.k8s.io/sig-storage/hostpathplugin), the one part of that image the e2e suite's DRA specs use.
//
// The DRA specs (k8s.io/kubernetes test/e2e/dra/utils/deploy.go) run the test driver's kubelet plugin inside the
// e2e.test process. To reach the node they exec, in a privileged proxy pod,
//
//	/hostpathplugin --v=5 --endpoint=<unix socket on the node> --proxy-endpoint=tcp://:<port>
//
// and port-forward to <port> (test/e2e/storage/drivers/proxy): every port-forward stream is one connection that the
// e2e side's gRPC server accepts. This program listens on both; each connection the kubelet opens on the unix
// socket is paired with the next TCP connection and the bytes are copied both ways until either side ends. The
// module proxy refuses github.com/kubernetes-csi/csi-driver-host-path (403 for v1.7.3 and v1.16.1), so the testbed
// builds this instead (standard library only) and ships it as /hostpathplugin in a busybox image.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
)

func main() {
	endpoint := flag.String("endpoint", "", "unix socket to serve (unix:// prefix optional)")
	proxyEndpoint := flag.String("proxy-endpoint", "", "tcp://[host]:port the other side's connections arrive on")
	flag.Int("v", 0, "log verbosity (accepted for hostpathplugin's command line; every event is logged)")
	flag.String("nodeid", "", "accepted for hostpathplugin's command line; unused")
	flag.Parse()
	if *endpoint == "" || !strings.HasPrefix(*proxyEndpoint, "tcp://") {
		log.Fatalf("usage: --endpoint=<unix socket> --proxy-endpoint=tcp://[host]:port")
	}
	socket := strings.TrimPrefix(*endpoint, "unix://")
	tcp, err := net.Listen("tcp", strings.TrimPrefix(*proxyEndpoint, "tcp://"))
	if err != nil {
		log.Fatalf("msg=\"listen failed\" endpoint=%s err=%q", *proxyEndpoint, err)
	}
	// A socket a killed instance left is stale (hostpathplugin removes it too).
	if err := os.Remove(socket); err != nil && !os.IsNotExist(err) {
		log.Fatalf("msg=\"remove stale socket failed\" endpoint=%s err=%q", socket, err)
	}
	unix, err := net.Listen("unix", socket)
	if err != nil {
		log.Fatalf("msg=\"listen failed\" endpoint=%s err=%q", socket, err)
	}
	log.Printf("msg=proxying endpoint=%s proxy_endpoint=%s", socket, *proxyEndpoint)

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		sig := <-signals
		log.Printf("msg=stopping signal=%s", sig)
		_ = unix.Close() // unlinks the socket
		os.Exit(0)
	}()

	for n := 0; ; n++ {
		local, err := unix.Accept()
		if err != nil {
			log.Fatalf("msg=\"accept failed\" endpoint=%s err=%q", socket, err)
		}
		remote, err := tcp.Accept()
		if err != nil {
			log.Fatalf("msg=\"accept failed\" endpoint=%s err=%q", *proxyEndpoint, err)
		}
		log.Printf("msg=paired connection=%d remote=%s", n, remote.RemoteAddr())
		go pipe(n, local, remote)
	}
}

// pipe copies both ways; when one direction ends, both connections are closed.
func pipe(n int, a, b net.Conn) {
	var once sync.Once
	done := func(direction string, err error) {
		once.Do(func() {
			log.Printf("msg=closed connection=%d direction=%s err=%s", n, direction, errText(err))
			_ = a.Close()
			_ = b.Close()
		})
	}
	go func() { _, err := io.Copy(b, a); done("kubelet-to-proxy", err) }()
	_, err := io.Copy(a, b)
	done("proxy-to-kubelet", err)
}

func errText(err error) string {
	if err == nil {
		return "eof"
	}
	return fmt.Sprintf("%q", err.Error())
}
