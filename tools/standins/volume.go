package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// runVolumeHelper is the local-path provisioner's helper (its setupCommand and
// teardownCommand, hack/lib/node.sh): `-p PATH -s SIZE -m MODE -a create|delete`
// makes or removes one volume's directory on the node, where busybox's
// `mkdir -m 0777 -p` and `rm -rf` would.
func runVolumeHelper(args []string) error {
	fs := flag.NewFlagSet("local-path-helper", flag.ContinueOnError)
	path := fs.String("p", "", "the volume's directory")
	fs.String("s", "", "requested size (not enforced: a local directory)")
	fs.String("m", "", "volume mode")
	action := fs.String("a", "", "create or delete")
	if err := fs.Parse(args); err != nil {
		return err
	}
	clean := filepath.Clean(*path)
	// The provisioner's paths are /<base>/<pvc dir>: refuse anything shorter.
	if !filepath.IsAbs(clean) || strings.Count(clean, "/") < 2 {
		return fmt.Errorf("refusing volume path %q", *path)
	}
	switch *action {
	case "create":
		if err := os.MkdirAll(clean, 0o777); err != nil {
			return err
		}
		return os.Chmod(clean, 0o777)
	case "delete":
		return os.RemoveAll(clean)
	default:
		return errors.New("-a must be create or delete")
	}
}
