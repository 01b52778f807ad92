"""`nodeagent conformance`: the upstream e2e suite's [NodeConformance] specs, run against a cluster whose only node
is nodeagent.

- `build`: e2e.test and the ginkgo CLI of the testbed's Kubernetes release, built once into the versioned cache;
- `repolist`: the KUBE_TEST_REPO_LIST file that points the suite's image registries at the testbed's registry;
- `images`: the images the suite names, which of them the registry holds, and the testbed images pushed under the
  suite's names;
- `run`: the ginkgo command line, run with its progress streamed;
- `junit` and `summary`: the JUnit report read back, counted, and the failures grouped by cause;
- `harness`: the whole command, a testbed brought up for it or a cluster given by kubeconfig;
- `certified` (with `speclist`, `shards`, `resume`, `merge`): `--certified`, the `[Conformance]` specs with no skip
  against a cluster, in shards of about 45 minutes that `--resume` completes, merged into one report.
"""
