package main

import (
	"fmt"
	"os"
	"syscall"
)

// evictDropCaches syncs every file system and drops the whole page cache,
// dentries and inodes (echo 3 > /proc/sys/vm/drop_caches; root only).
func evictDropCaches() error {
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0); err != nil {
		return fmt.Errorf("drop caches (needs root, Linux): %w", err)
	}
	return nil
}
