// grpc-health: the testbed's gRPC health server, the target of the kubelet's grpc probes in integration tests.
//
// It serves grpc.health.v1.Health on -port with the health service of google.golang.org/grpc: the overall
// service ("") and every name in -serving answer SERVING, every name in -not-serving answers NOT_SERVING, and any
// other name answers NOT_FOUND, as that implementation does. It stops on SIGTERM or SIGINT.
//
// Built statically (CGO_ENABLED=0) by `nodeagent testbed install` and packed into an image by the testbed, because
// no image can be pulled from outside on these machines.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func names(list string) []string {
	var out []string
	for _, name := range strings.Split(list, ",") {
		if name = strings.TrimSpace(name); name != "" {
			out = append(out, name)
		}
	}
	return out
}

func main() {
	port := flag.Int("port", 5000, "TCP port of the gRPC server")
	serving := flag.String("serving", "", "comma-separated service names that answer SERVING")
	notServing := flag.String("not-serving", "", "comma-separated service names that answer NOT_SERVING")
	flag.Parse()

	listener, err := net.Listen("tcp", fmt.Sprintf(":%d", *port))
	if err != nil {
		log.Fatalf("grpc-health: listen on port %d: %v", *port, err)
	}
	checker := health.NewServer()
	checker.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	for _, name := range names(*serving) {
		checker.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
	for _, name := range names(*notServing) {
		checker.SetServingStatus(name, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	server := grpc.NewServer()
	healthpb.RegisterHealthServer(server, checker)

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		sig := <-signals
		log.Printf("grpc-health: %v received, stopping", sig)
		server.Stop()
	}()

	log.Printf("grpc-health: serving on %s", listener.Addr())
	if err := server.Serve(listener); err != nil {
		log.Fatalf("grpc-health: serve: %v", err)
	}
}
