/* tensormorph/quant.h: quantization numerics (included by tensormorph.h). */
#ifndef TENSORMORPH_QUANT_H
#define TENSORMORPH_QUANT_H
#include "../tensormorph.h"
#endif
