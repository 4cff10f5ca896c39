package cpu

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/mlxgo/mlxgo/tensor"
)

// mappingRSSKiB returns the Rss line of /proc/self/smaps for the mapping
// that starts at addr.
func mappingRSSKiB(t *testing.T, addr uintptr) int {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	defer f.Close()
	head := fmt.Sprintf("%x-", addr)
	sc := bufio.NewScanner(f)
	in := false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, head) {
			in = true
			continue
		}
		if in && strings.HasPrefix(line, "Rss:") {
			v, err := strconv.Atoi(strings.Fields(line)[1])
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("mapping at %#x not in /proc/self/smaps", addr)
	return 0
}

// q8PageSink keeps the page-touching loop from being optimized away.
var q8PageSink byte

// TestQ8DropsBorrowedCodePages: with int8 activations, a weight borrowed
// from a read-only file mapping gives the kernel back the pages of its
// codes once repacked (the mapping's resident set falls), its bytes stay
// readable and unchanged, and the product equals the one over a private
// copy of the same weight.
func TestQ8DropsBorrowedCodePages(t *testing.T) {
	if !q8Kernels {
		t.Skip("no AVX512_VNNI: the int8 kernels are not built here")
	}
	defer SetInt8Activations(Int8Activations())
	SetInt8Activations(true)
	const n, k, gs, bits = 1024, 2048, 64, 4
	r := rand.New(rand.NewPCG(9, 9))
	wq, sc, bi := tensor.Quantize(tensor.FromFloat32(randF32(r, n*k), []int{n, k}, tensor.BFloat16), gs, bits)
	defer tensor.Free(wq, sc, bi)
	codes := wq.Bytes()
	path := filepath.Join(t.TempDir(), "codes.bin")
	// written back before it is mapped: the kernel keeps dirty pages
	// (still under writeback) resident whatever the repack advises
	if err := writeSynced(path, codes); err != nil {
		t.Fatal(err)
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(path, &fs); err == nil && fs.Type == 0x01021994 {
		t.Skip("the temporary folder is on tmpfs, whose pages are only reclaimed to swap")
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := syscall.Mmap(int(f.Fd()), 0, len(codes), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Skipf("mmap: %v", err)
	}
	defer syscall.Munmap(m)
	addr := uintptr(unsafe.Pointer(&m[0]))
	var sum byte
	for i := 0; i < len(m); i += 4096 { // fault every page in
		sum += m[i]
	}
	q8PageSink = sum
	before := mappingRSSKiB(t, addr)
	if before < len(codes)/1024*9/10 {
		t.Skipf("the mapping is not resident after reading it (%d KiB of %d)", before, len(codes)/1024)
	}
	be := tensor.Default()
	borrowed := tensor.FromBytesOn(be, m, wq.Shape(), wq.DType(), true)
	defer borrowed.Free()
	x := tensor.FromFloat32(randF32(r, 3*k), []int{3, k}, tensor.BFloat16)
	defer x.Free()
	got := tensor.QuantizedMatmul(x, borrowed, sc, bi, true, gs, bits)
	defer got.Free()
	after := mappingRSSKiB(t, addr)
	if after > before/4 {
		t.Errorf("the borrowed codes' mapping holds %d KiB after the repack, %d before: its pages were not given back", after, before)
	}
	if !bytes.Equal(m, codes) {
		t.Fatal("the borrowed codes changed after their pages were given back")
	}
	want := tensor.QuantizedMatmul(x, wq, sc, bi, true, gs, bits)
	defer want.Free()
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Error("the product over the borrowed weight differs from the one over a private copy")
	}
}

// writeSynced writes b to a new file at path and flushes it to disk.
func writeSynced(path string, b []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
