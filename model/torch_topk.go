package model

import "math/bits"

// torchTopK returns the indices torch.topk(vals, k) (largest, sorted)
// returns on the CPU, in its order, ties included. torch's CPU kernel
// pairs every value with its index and, when k·64 <= len, partially sorts
// the pairs (a heap of k), else selects the k-th with nth_element and
// sorts the k-1 before it, comparing values alone (NaN above everything):
// which of several tied values make the cut is that algorithm's doing,
// so this reproduces its steps (the GNU C++ library's introselect,
// introsort and heap routines, the ones torch's builds use) rather than
// any simpler tie rule. tools/oracle/topk_ties.py records torch's answers
// for the test.
func torchTopK(vals []float32, k int) []int {
	n := len(vals)
	if k <= 0 || n == 0 {
		return nil
	}
	k = min(k, n)
	q := make([]topkPair, n)
	for i, v := range vals {
		q[i] = topkPair{v, i}
	}
	s := pairSorter(q)
	if k*64 <= n {
		s.heapSelect(0, k, n)
		s.sortHeap(0, k)
	} else {
		s.nthElement(0, k-1, n)
		s.sort(0, k-1)
	}
	out := make([]int, k)
	for i := range out {
		out[i] = q[i].i
	}
	return out
}

type topkPair struct {
	v float32
	i int
}

// pairSorter runs the library routines over pairs with torch's "largest"
// comparator.
type pairSorter []topkPair

// less is torch's comparator for largest: x before y when x is NaN and y
// is not, or x's value is greater.
func less(x, y topkPair) bool {
	xn, yn := x.v != x.v, y.v != y.v
	return (xn && !yn) || x.v > y.v
}

func (s pairSorter) swap(a, b int) { s[a], s[b] = s[b], s[a] }

func lg(n int) int { return bits.Len(uint(n)) - 1 }

// nthElement is std::nth_element(first, nth, last).
func (s pairSorter) nthElement(first, nth, last int) {
	if first == last || nth == last {
		return
	}
	depth := 2 * lg(last-first)
	for last-first > 3 {
		if depth == 0 {
			s.heapSelect(first, nth+1, last)
			s.swap(first, nth)
			return
		}
		depth--
		cut := s.partitionPivot(first, last)
		if cut <= nth {
			first = cut
		} else {
			last = cut
		}
	}
	s.insertionSort(first, last)
}

// sort is std::sort(first, last).
func (s pairSorter) sort(first, last int) {
	if first == last {
		return
	}
	s.introsortLoop(first, last, 2*lg(last-first))
	s.finalInsertionSort(first, last)
}

const sortThreshold = 16

func (s pairSorter) introsortLoop(first, last, depth int) {
	for last-first > sortThreshold {
		if depth == 0 {
			s.heapSelect(first, last, last)
			s.sortHeap(first, last)
			return
		}
		depth--
		cut := s.partitionPivot(first, last)
		s.introsortLoop(cut, last, depth)
		last = cut
	}
}

func (s pairSorter) finalInsertionSort(first, last int) {
	if last-first > sortThreshold {
		s.insertionSort(first, first+sortThreshold)
		for i := first + sortThreshold; i < last; i++ {
			s.unguardedLinearInsert(i)
		}
		return
	}
	s.insertionSort(first, last)
}

// partitionPivot moves the median of first+1, the middle and last-1 to
// first and partitions the rest around it.
func (s pairSorter) partitionPivot(first, last int) int {
	mid := first + (last-first)/2
	s.moveMedianToFirst(first, first+1, mid, last-1)
	return s.unguardedPartition(first+1, last, first)
}

func (s pairSorter) moveMedianToFirst(result, a, b, c int) {
	switch {
	case less(s[a], s[b]):
		switch {
		case less(s[b], s[c]):
			s.swap(result, b)
		case less(s[a], s[c]):
			s.swap(result, c)
		default:
			s.swap(result, a)
		}
	case less(s[a], s[c]):
		s.swap(result, a)
	case less(s[b], s[c]):
		s.swap(result, c)
	default:
		s.swap(result, b)
	}
}

func (s pairSorter) unguardedPartition(first, last, pivot int) int {
	for {
		for less(s[first], s[pivot]) {
			first++
		}
		last--
		for less(s[pivot], s[last]) {
			last--
		}
		if first >= last {
			return first
		}
		s.swap(first, last)
		first++
	}
}

func (s pairSorter) insertionSort(first, last int) {
	if first == last {
		return
	}
	for i := first + 1; i < last; i++ {
		if less(s[i], s[first]) {
			v := s[i]
			copy(s[first+1:i+1], s[first:i])
			s[first] = v
		} else {
			s.unguardedLinearInsert(i)
		}
	}
}

func (s pairSorter) unguardedLinearInsert(last int) {
	v := s[last]
	next := last - 1
	for less(v, s[next]) {
		s[last] = s[next]
		last = next
		next--
	}
	s[last] = v
}

// heapSelect leaves in [first, middle) a heap of the middle-first
// elements that come first.
func (s pairSorter) heapSelect(first, middle, last int) {
	s.makeHeap(first, middle)
	for i := middle; i < last; i++ {
		if less(s[i], s[first]) {
			s.popHeap(first, middle, i)
		}
	}
}

func (s pairSorter) makeHeap(first, last int) {
	n := last - first
	if n < 2 {
		return
	}
	for parent := (n - 2) / 2; ; parent-- {
		s.adjustHeap(first, parent, n, s[first+parent])
		if parent == 0 {
			return
		}
	}
}

func (s pairSorter) adjustHeap(first, hole, n int, v topkPair) {
	top := hole
	child := hole
	for child < (n-1)/2 {
		child = 2 * (child + 1)
		if less(s[first+child], s[first+child-1]) {
			child--
		}
		s[first+hole] = s[first+child]
		hole = child
	}
	if n&1 == 0 && child == (n-2)/2 {
		child = 2 * (child + 1)
		s[first+hole] = s[first+child-1]
		hole = child - 1
	}
	// push v up from hole, no higher than top
	parent := (hole - 1) / 2
	for hole > top && less(s[first+parent], v) {
		s[first+hole] = s[first+parent]
		hole = parent
		parent = (hole - 1) / 2
	}
	s[first+hole] = v
}

// popHeap moves the heap's top to result and re-heaps [first, last) with
// result's old value.
func (s pairSorter) popHeap(first, last, result int) {
	v := s[result]
	s[result] = s[first]
	s.adjustHeap(first, 0, last-first, v)
}

func (s pairSorter) sortHeap(first, last int) {
	for last-first > 1 {
		last--
		s.popHeap(first, last, last)
	}
}
