// Stand-ins for the images the local node runs (hack/lib/node.sh builds them
// into images and pushes them to the node's registry). Standard library only.
module tinycode-operator/tools/standins

go 1.26.0
