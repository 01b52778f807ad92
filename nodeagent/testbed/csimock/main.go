// csi-mock serves Kubernetes' own CSI mock driver (k8s.io/kubernetes/test/e2e/storage/drivers/csi-test, the
// driver the e2e suite tests the kubelet's CSI code with) on a unix socket, as a host process of the testbed.
//
// Upstream runs that driver embedded in the e2e binary behind a proxy pod; csi-test v5 dropped its standalone
// mock-driver command, so this is the small main that the in-cluster mock image used to have. Every call is logged
// as a `gRPCCall: {json}` line at -v=3, as the driver's own interceptor logs it, which tests read as its call log.
//
// The driver keeps its volumes in memory. With --volumes-file, every CreateVolume and DeleteVolume that succeeded is
// journaled there and replayed, in order, at the next start: a driver killed and restarted knows the volumes it made
// before, under the same IDs (the mock numbers them in creation order). Staged and published state is not kept.
//
// With --faults-file, every call first reads that JSON file (absent: no faults) for its method's short name, as the
// e2e suite's Hooks.Pre/Post do for the embedded mock: {"NodePublishVolume": {"sleep": 30, "code": 13, "message":
// "..."}, "NodeGetVolumeStats": {"abnormal": "..."}}: sleep first (logged as `fault: sleeping` when it starts), then
// fail with the gRPC code and message, or answer NodeGetVolumeStats with an abnormal volume condition. A
// NodePublishVolume entry with "device": "/dev/loopN" publishes a Block volume as that device: the target the mock
// made is replaced by a block device node of the same number, as a real driver's bind mount of its device would be.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	mockdriver "k8s.io/kubernetes/test/e2e/storage/drivers/csi-test/driver"
	"k8s.io/kubernetes/test/e2e/storage/drivers/csi-test/mock/service"
)

type created struct {
	Name          string `json:"name"`
	CapacityBytes int64  `json:"capacity_bytes"`
}

type journalEntry struct {
	Create *created `json:"create,omitempty"`
	Delete string   `json:"delete,omitempty"`
}

// replay makes the journaled volumes again, in order, so they get the IDs they had.
func replay(svc service.Service, path string) error {
	file, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	defer file.Close()
	capability := []*csi.VolumeCapability{{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}}
	lines := bufio.NewScanner(file)
	for lines.Scan() {
		var entry journalEntry
		if err := json.Unmarshal(lines.Bytes(), &entry); err != nil {
			continue // a line cut by a kill
		}
		ctx := context.Background()
		if entry.Create != nil {
			req := &csi.CreateVolumeRequest{Name: entry.Create.Name, VolumeCapabilities: capability,
				CapacityRange: &csi.CapacityRange{RequiredBytes: entry.Create.CapacityBytes}}
			if _, err := svc.CreateVolume(ctx, req); err != nil {
				return fmt.Errorf("replay CreateVolume %s: %w", entry.Create.Name, err)
			}
		} else if entry.Delete != "" {
			if _, err := svc.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: entry.Delete}); err != nil {
				return fmt.Errorf("replay DeleteVolume %s: %w", entry.Delete, err)
			}
		}
	}
	return lines.Err()
}

// fault is what --faults-file asks of one method.
type fault struct {
	Sleep    float64 `json:"sleep"`
	Code     uint32  `json:"code"`
	Message  string  `json:"message"`
	Abnormal string  `json:"abnormal"`
	Device   string  `json:"device"`
}

// publishDevice makes the target of a published Block volume a device node of `device`.
func publishDevice(target, device string) error {
	var st syscall.Stat_t
	if err := syscall.Stat(device, &st); err != nil {
		return err
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFBLK {
		return fmt.Errorf("%s is not a block device", device)
	}
	if err := os.RemoveAll(target); err != nil {
		return err
	}
	return syscall.Mknod(target, syscall.S_IFBLK|0o660, int(st.Rdev))
}

func readFault(path, method string) (fault, bool) {
	if path == "" {
		return fault{}, false
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fault{}, false
	}
	var faults map[string]fault
	if err := json.Unmarshal(data, &faults); err != nil {
		klog.ErrorS(err, "faults file", "path", path)
		return fault{}, false
	}
	f, ok := faults[method[strings.LastIndex(method, "/")+1:]]
	return f, ok
}

// handle runs the call with the fault asked for its method, if any.
func handle(ctx context.Context, faults string, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	f, ok := readFault(faults, info.FullMethod)
	if !ok {
		return handler(ctx, req)
	}
	if f.Sleep > 0 {
		klog.InfoS("fault: sleeping", "method", info.FullMethod, "seconds", f.Sleep)
		select {
		case <-time.After(time.Duration(f.Sleep * float64(time.Second))):
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	if f.Code != 0 {
		return nil, status.Error(codes.Code(f.Code), f.Message)
	}
	rsp, err := handler(ctx, req)
	if stats, isStats := rsp.(*csi.NodeGetVolumeStatsResponse); isStats && err == nil && f.Abnormal != "" {
		stats.VolumeCondition = &csi.VolumeCondition{Abnormal: true, Message: f.Abnormal}
	}
	if publish, isPublish := req.(*csi.NodePublishVolumeRequest); isPublish && err == nil && f.Device != "" &&
		publish.GetVolumeCapability().GetBlock() != nil {
		if derr := publishDevice(publish.GetTargetPath(), f.Device); derr != nil {
			return nil, status.Errorf(codes.Internal, "publish device %s at %s: %v", f.Device, publish.GetTargetPath(), derr)
		}
	}
	return rsp, err
}

// interceptor logs every call as the driver's own interceptor does, and journals the volumes made and deleted.
func interceptor(journal, faults string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		rsp, err := handle(ctx, faults, req, info, handler)
		logCall(info.FullMethod, req, rsp, err)
		if err == nil && journal != "" {
			var entry journalEntry
			switch r := req.(type) {
			case *csi.CreateVolumeRequest:
				entry.Create = &created{r.GetName(), rsp.(*csi.CreateVolumeResponse).GetVolume().GetCapacityBytes()}
			case *csi.DeleteVolumeRequest:
				entry.Delete = r.GetVolumeId()
			default:
				return rsp, err
			}
			if jerr := appendJournal(journal, entry); jerr != nil {
				klog.ErrorS(jerr, "journal", "path", journal)
			}
		}
		return rsp, err
	}
}

func appendJournal(path string, entry journalEntry) error {
	line, err := json.Marshal(entry)
	if err != nil {
		return err
	}
	file, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer file.Close()
	_, err = file.Write(append(line, '\n'))
	return err
}

// logCall writes the line the e2e suite parses from the mock driver's log (driver.logGRPC).
func logCall(method string, request, reply any, err error) {
	message := struct {
		Method    string
		Request   any
		Response  any
		Error     string
		FullError error
	}{Method: method, Request: request, Response: reply, FullError: err}
	if err != nil {
		message.Error = err.Error()
	}
	text, _ := json.Marshal(message)
	klog.V(3).Infof("gRPCCall: %s\n", text)
}

func main() {
	klog.InitFlags(nil)
	endpoint := flag.String("csi-address", os.Getenv("CSI_ENDPOINT"), "unix socket to serve on (default: $CSI_ENDPOINT)")
	var cfg service.Config
	enableAttach := flag.Bool("enable-attach", false, "serve ControllerPublish/Unpublish (PUBLISH_UNPUBLISH_VOLUME)")
	flag.StringVar(&cfg.DriverName, "drivername", service.Name, "CSI driver name; also the node ID NodeGetInfo returns")
	flag.Int64Var(&cfg.AttachLimit, "attach-limit", 0, "max volumes per node reported by NodeGetInfo (0: unset)")
	flag.BoolVar(&cfg.NodeExpansionRequired, "node-expand-required", false, "report the EXPAND_VOLUME node capability")
	flag.BoolVar(&cfg.NodeVolumeConditionRequired, "node-volume-condition", false, "report VOLUME_CONDITION")
	flag.BoolVar(&cfg.VolumeMountGroupRequired, "enable-volume-mount-group", false, "report VOLUME_MOUNT_GROUP")
	flag.BoolVar(&cfg.DisableControllerExpansion, "disable-controller-expansion", false, "no EXPAND_VOLUME controller capability")
	flag.BoolVar(&cfg.DisableOnlineExpansion, "disable-online-expansion", false, "OFFLINE instead of ONLINE volume expansion")
	flag.BoolVar(&cfg.PermissiveTargetPath, "permissive-target-path", false, "accept a NodePublish target path that exists")
	flag.BoolVar(&cfg.EnableTopology, "enable-topology", false, "report the "+service.TopologyKey+" topology segment")
	volumesFile := flag.String("volumes-file", "", "journal of CreateVolume/DeleteVolume, replayed at start")
	faultsFile := flag.String("faults-file", "", "JSON of faults per method, read at every call")
	flag.Parse()
	cfg.DisableAttach = !*enableAttach
	if *endpoint == "" {
		klog.Exit("--csi-address or CSI_ENDPOINT is required")
	}
	// A socket left by a driver that was killed would make Listen fail with EADDRINUSE.
	if err := os.Remove(*endpoint); err != nil && !errors.Is(err, os.ErrNotExist) {
		klog.Exitf("remove stale socket %s: %v", *endpoint, err)
	}
	listener, err := net.Listen("unix", *endpoint)
	if err != nil {
		klog.Exitf("listen on %s: %v", *endpoint, err)
	}
	svc := service.New(cfg)
	if *volumesFile != "" {
		if err := replay(svc, *volumesFile); err != nil {
			klog.Exitf("replay %s: %v", *volumesFile, err)
		}
	}
	driver := mockdriver.NewCSIDriver(&mockdriver.CSIDriverServers{Controller: svc, Identity: svc, Node: svc})
	if err := driver.Start(listener, interceptor(*volumesFile, *faultsFile)); err != nil {
		klog.Exitf("start driver: %v", err)
	}
	klog.InfoS("csi-mock serving", "endpoint", *endpoint, "driver", cfg.DriverName, "attach", *enableAttach)
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	sig := <-signals
	klog.InfoS("csi-mock stopping", "signal", fmt.Sprint(sig))
	driver.Stop()
	_ = os.Remove(*endpoint)
	klog.Flush()
}
