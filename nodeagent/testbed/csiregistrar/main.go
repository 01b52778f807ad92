// csi-registrar is the testbed's plugin-registration sidecar: what node-driver-registrar does for a CSI driver,
// which the module proxy here does not serve. It asks the driver for its name (GetPluginInfo), then serves the
// kubelet's Registration service (k8s.io/kubelet/pkg/apis/pluginregistration/v1) on
// <plugin-registration-path>/<driver>-reg.sock, where the kubelet's plugin watcher finds it.
package main

import (
	"context"
	"errors"
	"flag"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

type registrar struct {
	registerapi.UnimplementedRegistrationServer
	driver, endpoint string
	versions         []string
}

func (r *registrar) GetInfo(ctx context.Context, _ *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	klog.InfoS("GetInfo", "driver", r.driver)
	return &registerapi.PluginInfo{
		Type: registerapi.CSIPlugin, Name: r.driver, Endpoint: r.endpoint, SupportedVersions: r.versions,
	}, nil
}

func (r *registrar) NotifyRegistrationStatus(ctx context.Context, status *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	klog.InfoS("NotifyRegistrationStatus", "registered", status.PluginRegistered, "error", status.Error)
	if !status.PluginRegistered {
		// As node-driver-registrar: a refused registration ends the sidecar, so its restart retries it.
		klog.ErrorS(nil, "registration failed", "error", status.Error)
		os.Exit(1)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// driverName asks the driver at csiAddress for its name, retrying until it answers (the driver may start later).
func driverName(csiAddress string, timeout time.Duration) (string, error) {
	conn, err := grpc.NewClient("unix://"+csiAddress, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := csi.NewIdentityClient(conn).GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
		cancel()
		if err == nil {
			return info.GetName(), nil
		}
		if time.Now().After(deadline) {
			return "", err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func main() {
	klog.InitFlags(nil)
	csiAddress := flag.String("csi-address", "", "the driver's socket, asked for the driver name")
	kubeletPath := flag.String("kubelet-registration-path", "", "the driver's socket as the kubelet sees it (default: --csi-address)")
	registrationDir := flag.String("plugin-registration-path", "", "the kubelet's plugins_registry directory")
	versions := flag.String("supported-versions", "1.0.0", "comma-separated CSI versions GetInfo reports")
	connectTimeout := flag.Duration("timeout", 30*time.Second, "how long to wait for the driver's GetPluginInfo")
	flag.Parse()
	if *csiAddress == "" || *registrationDir == "" {
		klog.Exit("--csi-address and --plugin-registration-path are required")
	}
	if *kubeletPath == "" {
		*kubeletPath = *csiAddress
	}
	name, err := driverName(*csiAddress, *connectTimeout)
	if err != nil {
		klog.Exitf("GetPluginInfo from %s: %v", *csiAddress, err)
	}
	socket := filepath.Join(*registrationDir, name+"-reg.sock")
	if err := os.Remove(socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		klog.Exitf("remove stale socket %s: %v", socket, err)
	}
	listener, err := net.Listen("unix", socket)
	if err != nil {
		klog.Exitf("listen on %s: %v", socket, err)
	}
	server := grpc.NewServer()
	registerapi.RegisterRegistrationServer(server, &registrar{
		driver: name, endpoint: *kubeletPath, versions: strings.Split(*versions, ","),
	})
	go func() {
		if err := server.Serve(listener); err != nil {
			klog.ErrorS(err, "registration server stopped")
		}
	}()
	klog.InfoS("csi-registrar serving", "socket", socket, "driver", name, "endpoint", *kubeletPath)
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	<-signals
	// The socket goes first: its removal is what tells the kubelet's plugin watcher to deregister the driver.
	_ = os.Remove(socket)
	server.Stop()
	klog.InfoS("csi-registrar stopped", "socket", socket)
	klog.Flush()
}
