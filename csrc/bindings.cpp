#include <pybind11/pybind11.h>
PYBIND11_MODULE(_C, m) { m.def("hello", []{ return 1; }); }
